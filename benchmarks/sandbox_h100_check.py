"""The sandbox on a GPU machine (root, no bubblewrap, as the device machines run): which layers are active, and every
attack of tests/adversarial/test_sandbox.py with the static checks off, each followed by the honest control.

    python benchmarks/sandbox_h100_check.py --out benchmarks/results/sandbox_h100_check.json

Prints EvalResult.sandbox of an honest candidate, then one row per attack test (pass = the attack
failed and the honest control after it was `correct`), and writes JSON. The GPU-only test (a
poisoned Triton cache) runs here too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class _Collect:
    def __init__(self):
        self.rows = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            message = "" if report.passed else str(report.longrepr).strip().splitlines()[-1][:160]
            self.rows.append({"test": report.nodeid.split("::")[-1], "outcome": report.outcome,
                              "seconds": round(report.duration, 2), "message": message})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="benchmarks/results/sandbox_h100_check.json")
    args = ap.parse_args()
    os.environ["KBENCH_SANDBOX_TEST_DEVICE"] = args.device
    import pytest

    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    relu = next(p for p in load_bundled(1) if p.problem_id == 1)
    t = time.perf_counter()
    with Evaluator(EvalConfig(device=args.device, sandbox="auto", static_checks=False,
                                accept_cpu_tripwires_only=args.device == "cpu")) as ev:
        start_s = time.perf_counter() - t
        honest = ev.evaluate(relu, "```python\n" + relu.solution_source + "```")
    print(f"Evaluator start {start_s:.1f} s; honest ReLU: {honest.status.value} {honest.error}")
    print("EvalResult.sandbox:")
    for layer in honest.sandbox:
        print("   ", layer)
    collect = _Collect()
    code = pytest.main(["-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "adversarial" / "test_sandbox.py")], plugins=[collect])
    print(f"\n{'attack test':<62} {'outcome':>8} {'s':>7}  message")
    for row in collect.rows:
        print(f"{row['test']:<62} {row['outcome']:>8} {row['seconds']:>7.1f}  {row['message']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": args.device, "start_s": round(start_s, 2),
                                          "honest": honest.status.value, "sandbox": honest.sandbox,
                                          "tests": collect.rows, "pytest_exit": int(code)}, indent=1))
    print(f"wrote {args.out}")
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
