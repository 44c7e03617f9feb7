"""`kbench check` wall time on one candidate: cold (a local Evaluator per call) against warm (served by
`kbench serve-eval`), same config, calls alternating, medians over N repeats.

    python benchmarks/check_latency.py --device cpu --repeats 5 --out benchmarks/results/check_latency_cpu.json
    python benchmarks/check_latency.py --device cuda:0 --repeats 5 --out benchmarks/results/check_latency_h100.json

The candidate is the bundled solution of --level/--problem-id (L1_1_ReLU by default), so every call is
`correct`. Each figure is the wall time of a whole `kbench check ... --json` process, as a user sees
it: Python start, problem parsing, and either the Evaluator start (fork server, judge, CUDA, Triton)
plus the evaluation, or a socket round trip to the warm server plus the evaluation. Also reported: the
server's own start time and the median `eval_seconds` the verdicts record. Extra EvalConfig key=value
arguments go to both server and client.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _server(sock: Path, device: str, overrides: list[str], log: Path) -> tuple[subprocess.Popen, float]:
    from kbencheval.eval.cli.client import ping
    from kbencheval.eval.cli.service import ServiceUnavailable

    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kbencheval.cli", "serve-eval", "--device", device, "--socket",
                             str(sock), *overrides], stdout=subprocess.DEVNULL, stderr=log.open("w"), env=ENV)
    while time.monotonic() - t0 < 300:
        try:
            ping(sock, timeout_s=5)
            return proc, time.monotonic() - t0
        except ServiceUnavailable:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"kbench serve-eval did not come up: {log.read_text()[-2000:]}")


def _check(args, kernel: Path, sock: Path, served: bool) -> dict:
    cmd = [sys.executable, "-m", "kbencheval.cli", "check", "--level", str(args.level), "--problem-id",
           str(args.problem_id), "--kernel", str(kernel), "--device", args.device, "--socket", str(sock), "--json",
           *([] if served else ["--no-server"]), *args.overrides]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=ENV)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"kbench check failed ({r.returncode}): {r.stderr[-2000:]}")
    result = json.loads(r.stdout)
    if ("served_by" in result["checks"]) != served:
        raise SystemExit(f"expected served={served}, got {result['checks'].get('served_by')}: {r.stderr.strip()}")
    return {"wall_s": round(wall, 3), "eval_seconds": result["eval_seconds"], "status": result["status"]}


def _row(mode: str, calls: list[dict]) -> dict:
    walls = [c["wall_s"] for c in calls]
    return {"mode": mode, "median_s": round(statistics.median(walls), 3), "min_s": min(walls), "max_s": max(walls),
            "n": len(walls), "median_eval_seconds": round(statistics.median(c["eval_seconds"] for c in calls), 3),
            "statuses": sorted({c["status"] for c in calls}), "calls": calls}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="example: python benchmarks/check_latency.py --device cpu --repeats 5 "
                                       "--out benchmarks/results/check_latency_cpu.json")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--problem-id", type=int, default=1)
    p.add_argument("--out", default=None, help="write the JSON here")
    p.add_argument("overrides", nargs="*", help="EvalConfig key=value for server and client")
    args = p.parse_args()
    from kbencheval.dataset import get_problem

    problem = get_problem("bundled", args.level, args.problem_id)
    with tempfile.TemporaryDirectory(prefix="check-latency-") as tmp:
        kernel, sock = Path(tmp) / "kernel.py", Path(tmp) / "eval.sock"
        kernel.write_text(problem.solution_source)
        proc, start_s = _server(sock, args.device, args.overrides, Path(tmp) / "server.log")
        try:
            _check(args, kernel, sock, served=True)  # the server's first candidate warms its judge: not timed
            cold, warm = [], []
            for _ in range(args.repeats):  # alternating, so load drifts hit both modes alike
                cold.append(_check(args, kernel, sock, served=False))
                warm.append(_check(args, kernel, sock, served=True))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    rows = [_row("cold (local Evaluator)", cold), _row("warm (kbench serve-eval)", warm)]
    print(f"kbench check on {problem.key}, device {args.device}, {args.repeats} repeats; server start {start_s:.2f} s")
    print(f"{'mode':<28}{'median s':>10}{'min s':>8}{'max s':>8}{'eval s':>8}")
    for r in rows:
        print(f"{r['mode']:<28}{r['median_s']:>10.2f}{r['min_s']:>8.2f}{r['max_s']:>8.2f}"
              f"{r['median_eval_seconds']:>8.2f}")
    ratio = rows[0]["median_s"] / rows[1]["median_s"]
    print(f"warm is {ratio:.1f}x faster per call (median wall time)")
    if args.out:
        out = {"device": args.device, "host": platform.node(), "cpu_cores": os.cpu_count(),
               "python": platform.python_version(),
               "problem": problem.key, "args": vars(args), "server_start_s": round(start_s, 3), "rows": rows,
               "cold_over_warm_median": round(ratio, 2)}
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
