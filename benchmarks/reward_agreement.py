"""Training rewards against final verdicts: how fast correctness-only rewards are judged (the Triton
interpreter on CPU cores, GPU Evaluators with timing off) and how often the verdict a reward used agrees
with the full GPU evaluator (trusted timing on), on the kernels a GRPO run actually wrote.

    python benchmarks/reward_agreement.py RUN/rl/rollouts --problems RUN/synth/train --out agreement.json
    python benchmarks/reward_agreement.py RUN/rl/rollouts --problems RUN/synth/train --modes interpreter --limit 40

Candidates are the distinct (problem, code) pairs of the last `--steps` rollout files, at most `--limit`.
Every mode judges the same candidates, each once, from a fresh pool; samples/s counts the candidates
judged over the pool's wall time, start-up excluded. "Agreement" compares correct / not correct: the
verdict recorded in the rollout (what the reward paid for) and each mode's, against `gpu_full`. Modes that
need a GPU are reported as not run on a machine without one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = ("interpreter", "gpu_timing_off", "gpu_full")


def distinct_candidates(rollouts: Path, steps: int, limit: int) -> list[dict]:
    """{'key', 'text', 'recorded'} for distinct code per problem, newest steps first."""
    from kbencheval.extract import extract_code
    from smart.tracking import load_rollouts

    files = sorted(rollouts.glob("step_*.jsonl"))[-steps:][::-1]
    if not files:
        raise SystemExit(f"reward_agreement: no step_*.jsonl in {rollouts}; point it at a GRPO run's rollouts/ folder")
    seen, out = set(), []
    for path in files:
        for s in load_rollouts(path):
            code = extract_code(s.response_text)
            if code is None or s.eval_result is None or (s.problem_key, code) in seen:
                continue
            seen.add((s.problem_key, code))
            out.append({"key": s.problem_key, "text": s.response_text, "recorded": s.eval_result.status.value})
            if len(out) == limit:
                return out
    return out


def judge(mode: str, problems: dict, candidates: list[dict], args) -> dict:
    import torch

    from kbencheval.eval import EvalConfig, EvaluatorPool

    if mode != "interpreter" and not torch.cuda.is_available():
        return {"not_run": "no GPU on this machine"}
    if mode == "interpreter":
        cfg, devices = EvalConfig(device="cpu", timing=False, trials=args.trials), ["cpu"] * args.cpu_evaluators
    else:
        cfg = EvalConfig(device="cuda", timing=mode == "gpu_full", trials=args.trials)
        devices = [f"cuda:{i}" for i in range(torch.cuda.device_count()) for _ in range(args.evaluators_per_gpu)]
    jobs = [(problems[c["key"]], c["text"]) for c in candidates]
    with EvaluatorPool(cfg, devices, dedupe=False) as pool:
        pool.wait_ready()
        started = time.monotonic()
        results = pool.evaluate(jobs)
        seconds = time.monotonic() - started
    return {"evaluators": len(devices), "seconds": round(seconds, 2), "per_s": round(len(jobs) / seconds, 2),
            "statuses": [r.status.value for r in results]}


def agreement(a: list[str], b: list[str]) -> dict:
    pairs = [(x == "correct", y == "correct") for x, y in zip(a, b)]
    agree = sum(x == y for x, y in pairs)
    return {"n": len(pairs), "agree": agree, "rate": round(agree / max(len(pairs), 1), 4),
            "correct_here_not_there": sum(x and not y for x, y in pairs),
            "correct_there_not_here": sum(y and not x for x, y in pairs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rollouts", type=Path, help="a GRPO run's rollouts/ folder (step_*.jsonl)")
    ap.add_argument("--problems", type=Path, required=True, help="the problems' folder (the run's data.path)")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8, help="the last N rollout files")
    ap.add_argument("--limit", type=int, default=400, help="at most this many distinct candidates")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--trials", type=int, default=2, help="correctness trials, as the training reward used")
    ap.add_argument("--cpu-evaluators", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--evaluators-per-gpu", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("reward_agreement.json"))
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := sorted(set(modes) - set(MODES)):
        ap.error(f"unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}")

    from kbencheval.dataset import ProblemError, load_problems

    try:
        problems = {p.key: p for p in load_problems("local", args.level, path=str(args.problems))}
    except ProblemError as e:
        raise SystemExit(f"reward_agreement: --problems: {e}") from None
    candidates = distinct_candidates(args.rollouts, args.steps, args.limit)
    missing = sorted({c["key"] for c in candidates} - set(problems))
    if missing:
        raise SystemExit(f"reward_agreement: {len(missing)} problems of the rollouts are not in {args.problems} "
                         f"(first: {missing[0]}); pass the folder the run trained on")
    report = {"candidates": len(candidates), "recorded_correct": sum(c["recorded"] == "correct" for c in candidates),
              "modes": {m: judge(m, problems, candidates, args) for m in modes}, "agreement": {}}
    recorded = [c["recorded"] for c in candidates]
    reference = report["modes"].get("gpu_full", {}).get("statuses")
    for name, verdicts in [("recorded", recorded)] + [(m, r.get("statuses")) for m, r in report["modes"].items()
                                                      if m != "gpu_full"]:
        if reference and verdicts:
            report["agreement"][f"{name}_vs_gpu_full"] = agreement(verdicts, reference)
    if "interpreter" in report["modes"] and "statuses" in report["modes"]["interpreter"]:
        report["agreement"]["recorded_vs_interpreter"] = agreement(recorded, report["modes"]["interpreter"]["statuses"])

    print(f"{len(candidates)} distinct candidates from {args.rollouts} "
          f"({report['recorded_correct']} recorded correct)")
    print(f"{'mode':<16} {'evaluators':>10} {'seconds':>8} {'samples/s':>10}")
    for mode, r in report["modes"].items():
        if "not_run" in r:
            print(f"{mode:<16} not run: {r['not_run']}")
        else:
            print(f"{mode:<16} {r['evaluators']:>10} {r['seconds']:>8} {r['per_s']:>10}")
    for name, a in report["agreement"].items():
        print(f"{name:<32} {a['agree']}/{a['n']} agree ({a['rate']:.1%}); correct only in the first: "
              f"{a['correct_here_not_there']}, only in the second: {a['correct_there_not_here']}")
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
