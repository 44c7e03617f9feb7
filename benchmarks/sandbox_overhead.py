"""What the sandbox costs: Evaluator start and per-candidate time with its layers on and off, and the
compile time the judge-built shared Triton cache saves.

    python benchmarks/sandbox_overhead.py --device cuda --out benchmarks/results/sandbox_overhead_h100.json
    python benchmarks/sandbox_overhead.py --device cpu --limit 3       # smoke run under the interpreter

Configurations, each a fresh Evaluator evaluating the same bundled solutions `--passes` times:
  none                 no sandbox (process groups, timeout and the env allowlist only)
  kernel               every kernel layer that works here (namespaces, no capabilities, Landlock, seccomp)
  kernel, no shared    the same without the shared Triton cache (every candidate compiles Triton's helpers)
  auto                 bubblewrap around the kernel layers, where bubblewrap works
Per candidate: wall time of evaluate(), and harness overhead = wall time minus the worker's own phases
(import, compile, trials, timing). Medians and p90 over all candidates of all passes after the first
candidate (which pays one-time compiles). Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbencheval.dataset import load_bundled  # noqa: E402
from kbencheval.eval.trusted.harness import EvalConfig, Evaluator, bwrap_works  # noqa: E402


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else None


def run_config(name: str, sandbox: str, shared: bool, problems, args) -> dict:
    os.environ["KBENCH_SHARED_TRITON_CACHE"] = "1" if shared else "0"
    t = time.perf_counter()
    ev = Evaluator(EvalConfig(device=args.device, sandbox=sandbox, timeout_s=300, iters=args.iters))
    start_s = time.perf_counter() - t
    rows = []
    try:
        for p in range(args.passes):
            for problem in problems:
                t = time.perf_counter()
                r = ev.evaluate(problem, "```python\n" + problem.solution_source + "```")
                wall = time.perf_counter() - t
                own = sum(r.checks.get("phases_s", {}).values())
                rows.append({"problem": problem.key, "pass": p, "status": r.status.value, "wall_s": round(wall, 3),
                             "overhead_s": round(wall - own, 3), "compile_s": r.checks.get("phases_s", {}).get("load_s")})
                print(f"  {name:<18} {problem.key:<30} {r.status.value:<14} wall={wall:.2f}s overhead={wall - own:.2f}s "
                      f"{r.error[:60]}", flush=True)
        layers = r.sandbox
    finally:
        ev.close()
    later = rows[1:]
    walls = [x["wall_s"] for x in later]
    overheads = [x["overhead_s"] for x in later]
    loads = [x["compile_s"] for x in later if x["compile_s"] is not None]
    return {"config": name, "sandbox": sandbox, "shared_triton_cache": shared, "start_s": round(start_s, 2),
            "correct": sum(x["status"] == "correct" for x in rows), "candidates": len(rows),
            "wall_median_s": statistics.median(walls) if walls else None, "wall_p90_s": pct(walls, 0.9),
            "overhead_median_s": statistics.median(overheads) if overheads else None,
            "overhead_p90_s": pct(overheads, 0.9),
            "load_compile_median_s": statistics.median(loads) if loads else None,
            "layers": layers, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--limit", type=int, default=10, help="bundled solutions per pass")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20, help="timed calls per model (GPU)")
    ap.add_argument("--out", default="benchmarks/results/sandbox_overhead.json")
    args = ap.parse_args()
    problems = [p for p in load_bundled(args.level) if p.solution_source][: args.limit]
    configs = [("none", "none", True), ("kernel", "kernel", True), ("kernel, no shared", "kernel", False)]
    if bwrap_works("cpu" if args.device == "cpu" else "cuda"):
        configs.append(("auto (bwrap)", "auto", True))
    results = [run_config(name, sandbox, shared, problems, args) for name, sandbox, shared in configs]
    base = results[0]
    print(f"\n{'config':<20} {'start s':>8} {'correct':>8} {'wall med s':>11} {'wall p90 s':>11} "
          f"{'overhead med s':>15} {'vs none s':>10} {'load+compile s':>15}")
    for r in results:
        delta = (r["overhead_median_s"] - base["overhead_median_s"]) if r["overhead_median_s"] is not None else None
        print(f"{r['config']:<20} {r['start_s']:>8.2f} {r['correct']:>4}/{r['candidates']:<3} "
              f"{r['wall_median_s'] or 0:>11.3f} {r['wall_p90_s'] or 0:>11.3f} {r['overhead_median_s'] or 0:>15.3f} "
              f"{delta if delta is not None else float('nan'):>10.3f} {r['load_compile_median_s'] or 0:>15.3f}")
    kernel = next(r for r in results if r["config"] == "kernel")
    print("\nlayers (kernel):", ", ".join(kernel["layers"]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": args.device, "problems": [p.key for p in problems],
                                          "passes": args.passes, "results": results}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
