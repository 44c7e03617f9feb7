"""Where the GPU was busy, by device-gate window, from an eval_harness.py result (one Evaluator).

    python benchmarks/eval_harness.py --device cuda --evaluators-per-device 1 --out runs/probes/eval_1w.json
    python benchmarks/probes/gpu_busy_by_window.py runs/probes/eval_1w.json

eval_harness.py samples nvidia-smi's utilization.gpu (the share of time any kernel ran) every 100 ms
and records every gate hold of every candidate on the same clock. With one Evaluator the windows do
not overlap, so each sample belongs to at most one: prepare, trials, timing_setup, timing (the
exclusive rounds), timed_outputs, or "outside" (a candidate's other time: worker start, cleanup).
Prints wall and busy seconds per window; with several Evaluators the attribution is meaningless.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SAMPLE_S = 0.1  # nvidia-smi -lms 100


def attribute(result: dict, pass_index: int = 0) -> dict:
    """{window: [wall seconds, busy seconds]} for one pass; a sample stands for the 100 ms before it."""
    name = f"pass{pass_index + 1}"
    holds, spans = [], []
    for row in result["problems"]:
        run = row.get(name) or {}
        spans.append(run.get("monotonic_span") or [0, 0])
        for window, gate in (run.get("gate_s") or {}).items():
            if window != "memory":  # the reservation spans all the others
                holds += [(start, end, window) for start, end in gate.get("holds") or []]
    table: dict[str, list[float]] = {}
    for at, percent in result["gpu_samples"][pass_index]:
        t = at - SAMPLE_S / 2
        window = next((w for start, end, w in holds if start <= t <= end), None)
        if window is None:
            window = "outside" if any(start <= t <= end for start, end in spans) else "between candidates"
        wall_busy = table.setdefault(window, [0.0, 0.0])
        wall_busy[0] += SAMPLE_S
        wall_busy[1] += SAMPLE_S * percent / 100
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="an eval_harness.py JSON written with --evaluators-per-device 1")
    parser.add_argument("--pass-index", type=int, default=0, help="which pass (0: the first)")
    args = parser.parse_args()
    try:
        result = json.loads(Path(args.result).read_text())
        summary = result["summary"]  # results written before the rename say workers_per_device
        workers = summary.get("evaluators_per_device", summary.get("workers_per_device"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        parser.error(f"{args.result} is not an eval_harness.py result ({type(e).__name__}: {e})")
    if workers != 1:
        parser.error("the windows of several Evaluators overlap: run eval_harness.py with --evaluators-per-device 1")
    if not result.get("gpu_samples"):
        parser.error("no GPU samples in this result: it ran without nvidia-smi (or before eval_harness.py took them)")
    table = attribute(result, args.pass_index)
    print(f"{'window':<20}{'wall s':>9}{'busy s':>9}{'busy %':>8}")
    for window, (wall, busy) in sorted(table.items(), key=lambda item: -item[1][1]):
        print(f"{window:<20}{wall:9.1f}{busy:9.1f}{100 * busy / wall:8.0f}")
    total_wall, total_busy = (sum(v[i] for v in table.values()) for i in (0, 1))
    print(f"{'all':<20}{total_wall:9.1f}{total_busy:9.1f}{100 * total_busy / total_wall:8.0f}")


if __name__ == "__main__":
    main()
