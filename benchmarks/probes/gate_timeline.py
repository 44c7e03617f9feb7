"""Where one device's time went in an eval_harness run, from the gate holds each verdict records.

    python benchmarks/probes/gate_timeline.py benchmarks/results/eval_harness_8w_h100.json [...]

Per pass: seconds some candidate timed (exclusive), seconds only shared work (trials, timer setups,
timed outputs) held the device, seconds nothing of ours held it; of the time timers waited, how long
no exclusive hold ran (timers waiting for shared work to drain, new shared work kept out by the
turnstile), and which phases' holds filled those drains. Prints a table; --out writes it as JSON.
"""

from __future__ import annotations

import argparse
import json

SHARED = ("trials", "timing_setup", "timed_outputs")


def union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def length(intervals) -> float:
    return sum(end - start for start, end in intervals)


def minus(intervals, cuts):
    """`intervals` less the union of `cuts`."""
    out = []
    for start, end in intervals:
        pieces = [[start, end]]
        for c0, c1 in cuts:
            kept = []
            for a, b in pieces:
                if c1 <= a or c0 >= b:  # no overlap
                    kept.append([a, b])
                    continue
                if a < c0:
                    kept.append([a, c0])
                if c1 < b:
                    kept.append([c1, b])
            pieces = kept
        out += pieces
    return out


def pass_summary(rows: list[dict]) -> dict:
    t0, t1 = min(r["monotonic_span"][0] for r in rows), max(r["monotonic_span"][1] for r in rows)
    holds = lambda names: [h for r in rows for n in names for h in r["gate_s"].get(n, {}).get("holds") or []]  # noqa: E731
    exclusive, shared = union(holds(["timing"])), union(holds(SHARED))
    waits = union([[r["gate_s"]["timing"]["holds"][0][0] - r["gate_s"]["timing"]["wait_s"], r["gate_s"]["timing"]["holds"][0][0]]
                   for r in rows if r["gate_s"].get("timing", {}).get("holds")])
    drains = minus(waits, exclusive)
    in_drains = {n: round(sum(length(minus([h], minus([h], drains))) for h in holds([n])), 2) for n in ("prepare", *SHARED)}
    return {"span_s": round(t1 - t0, 2), "exclusive_s": round(length(exclusive), 2),
            "shared_only_s": round(length(minus(shared, exclusive)), 2),
            "nothing_held_s": round(length(minus(minus([[t0, t1]], exclusive), shared)), 2),
            "timers_waiting_s": round(length(waits), 2), "draining_s": round(length(drains), 2),
            "hold_s_in_drains": in_drains}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="eval_harness JSON files")
    ap.add_argument("--out", default="", help="write the table as JSON here")
    args = ap.parse_args()
    table = {}
    print(f"{'run':<48} {'pass':<6} {'span':>6} {'excl':>6} {'shared':>7} {'none':>6} {'waits':>6} {'drain':>6}  holds in drains")
    for path in args.results:
        data = json.load(open(path))
        for key in ("pass1", "pass2"):
            rows = [p[key] for p in data["problems"] if p.get(key) and p[key].get("gate_s")]
            if not rows:
                continue
            s = table.setdefault(path, {})[key] = pass_summary(rows)
            print(f"{path.rsplit('/', 1)[-1][:48]:<48} {key:<6} {s['span_s']:>6} {s['exclusive_s']:>6} {s['shared_only_s']:>7} "
                  f"{s['nothing_held_s']:>6} {s['timers_waiting_s']:>6} {s['draining_s']:>6}  "
                  + " ".join(f"{n} {v}" for n, v in s["hold_s_in_drains"].items()))
    if args.out:
        json.dump(table, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
