"""Where a candidate's wall goes, from benchmarks/eval_harness.py results: per pass, the mean over candidates
of each part of its critical path, and how long the pass ran with fewer candidates in flight than
Evaluators (its ramp and tail).

    python benchmarks/probes/eval_harness_breakdown.py benchmarks/results/eval_harness_8w_h100.json \
        --out /tmp/breakdown.json

Columns (seconds, means per candidate): wall; mem_wait, the wait for its memory reservation, and of it
ready_after, the wait for its worker to be ready; mem_held; precompile and, of it, loading (launchers
and modules); cached (a count), its kernels the harness had compiled (kernel_cache.py); device_init,
worker_init, job_init and waited (the worker's start: its CUDA context, its setup before a job, its
job's start, and how long it waited for a job). underfull: seconds of the pass with fewer candidates
in flight than Evaluators.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

PARTS = {
    "wall": lambda r: r["wall_s"],
    "mem_wait": lambda r: r["gate_s"]["memory"]["wait_s"],
    "ready_after": lambda r: r["gate_s"]["memory"].get("ready_after_s"),
    "mem_held": lambda r: r["gate_s"]["memory"]["held_s"],
    "precompile": lambda r: (r.get("precompile") or {}).get("seconds"),
    "loading": lambda r: (r.get("precompile") or {}).get("loading_s"),
    "cached": lambda r: (r.get("precompile") or {}).get("kernels_cached"),
    "device_init": lambda r: (r.get("worker_start_s") or {}).get("device_init_s"),
    "worker_init": lambda r: (r.get("worker_start_s") or {}).get("worker_init_s"),
    "job_init": lambda r: (r.get("worker_start_s") or {}).get("job_init_s"),
    "waited": lambda r: (r.get("worker_start_s") or {}).get("waited_for_job_s"),
}


def underfull_s(rows: list[dict], evaluators: int) -> float:
    """Seconds of the pass with fewer than `evaluators` candidates in flight."""
    events = sorted([(r["span_s"][0], 1) for r in rows] + [(r["span_s"][1], -1) for r in rows])
    in_flight, last, total = 0, events[0][0], 0.0
    for t, change in events:
        if in_flight < evaluators:
            total += t - last
        in_flight, last = in_flight + change, t
    return total


def breakdown(result: dict) -> dict:
    summary = result["summary"]  # results written before the rename say workers_per_device
    evaluators = summary.get("evaluators_per_device", summary.get("workers_per_device"))
    out = {}
    for name in sorted({k for p in result["problems"] for k in p if k.startswith("pass")}):
        rows = [p[name] for p in result["problems"] if name in p and p[name].get("gate_s", {}).get("memory")]
        if not rows:
            continue
        means = {}
        for part, get in PARTS.items():
            values = [v for v in map(get, rows) if v is not None]
            means[part] = round(statistics.mean(values), 3) if values else None
        out[name] = {**means, "underfull": round(underfull_s(rows, evaluators), 2), "candidates": len(rows)}
    return out


def parts_summed(result: dict) -> dict:
    """Per pass, seconds summed over its candidates: each side's parts per phase (worker_parts_s,
    judge_parts_s) and the device gate's holds and waits per window."""
    out = {}
    for name in sorted({k for p in result["problems"] for k in p if k.startswith("pass")}):
        totals: dict = {}
        for row in (p[name] for p in result["problems"] if name in p):
            for side in ("worker_parts_s", "judge_parts_s"):
                for phase, parts in (row.get(side) or {}).items():
                    for part, seconds in parts.items():
                        key = f"{side.split('_')[0]}.{phase}.{part.removesuffix('_s')}"
                        totals[key] = totals.get(key, 0.0) + seconds
            for window, gate in (row.get("gate_s") or {}).items():
                for what in ("wait_s", "held_s"):
                    if isinstance(gate.get(what), (int, float)):
                        key = f"gate.{window}.{what.removesuffix('_s')}"
                        totals[key] = totals.get(key, 0.0) + gate[what]
        if totals:
            out[name] = {k: round(v, 2) for k, v in sorted(totals.items())}
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="eval_harness.py --out files")
    p.add_argument("--out", type=Path, help="write the table as JSON here")
    p.add_argument("--parts", action="store_true",
                   help="instead: per pass, seconds summed over candidates by side, phase and part, and per gate window")
    args = p.parse_args(argv)
    table = {}
    for path in args.results:
        try:
            table[path.name] = (parts_summed if args.parts else breakdown)(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError) as e:
            print(f"eval_harness_breakdown: {path} is not an eval_harness.py result ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return 2
    if args.parts:
        print_parts(table)
        if args.out:
            args.out.write_text(json.dumps(table, indent=1))
        return 0
    columns = [*PARTS, "underfull"]
    print(f"{'file':<48} {'pass':<6}" + "".join(f"{c:>12}" for c in columns))
    for name, passes in table.items():
        for pass_name, row in passes.items():
            cells = "".join(f"{'-' if row[c] is None else row[c]:>12}" for c in columns)
            print(f"{name[:48]:<48} {pass_name:<6}{cells}")
    if args.out:
        args.out.write_text(json.dumps(table, indent=1))
    return 0


def print_parts(table: dict) -> None:
    """One row per part, one column per file and pass."""
    columns = [(name, pass_name) for name, passes in table.items() for pass_name in passes]
    keys = sorted({k for passes in table.values() for row in passes.values() for k in row})
    print(f"{'part':<40}" + "".join(f"{name[-14:-5] + ':' + pass_name[-1]:>14}" for name, pass_name in columns))
    for key in keys:
        cells = "".join(f"{table[n][q].get(key, '-'):>14}" for n, q in columns)
        print(f"{key:<40}{cells}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
