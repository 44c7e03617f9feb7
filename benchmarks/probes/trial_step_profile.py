"""Where a correctness trial and a judged timed output spend their time, step by step (GPU or CPU).

    python benchmarks/probes/trial_step_profile.py --device cuda --out runs/probes/trial_step_profile.json

In eval_harness runs a worker's correctness trial and a picked timed output take tens of milliseconds of
shared device time, for kernels of a millisecond or less. This runs each step the worker
and the judge run for them, in one process (no fork, no sandbox, no transfer between processes), with
a device sync after each step, and prints the median milliseconds per step and problem. Copies run
side by side (--rotate) show what each step costs when several processes share the device, as eight
Evaluators' workers and judges do. The CUDA IPC
export of outputs is left out: in one process its memory is never let go (a fraction of a millisecond). The worker's
steps are worker.CandidateWorker.run_trials and export_timed; the judge's are judge.Judge.compare.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402,F401  (rebinds torch.manual_seed, as in the worker: before the tripwires)

from kbencheval.dataset import ProblemError, load_bundled  # noqa: E402
from kbencheval.eval.contract.inputs import (as_tensor_list, build_model, digest_bounds, inputs_fingerprint,  # noqa: E402
                                    load_problem_module, make_inputs, output_digest, pin_global_flags, sync)
from kbencheval.eval.trusted import judge_kernels  # noqa: E402
from kbencheval.eval.trusted.judge import Judge  # noqa: E402
from kbencheval.eval.trusted.compare import compare  # noqa: E402
from kbencheval.eval.contract.protocol import Prepare, TimingSpec, Trial  # noqa: E402
from kbencheval.eval.contract.seeds import RunSeeds, stress_names  # noqa: E402
from kbencheval.eval.contract.timing import Timer  # noqa: E402
from kbencheval.eval.untrusted.recorders import LaunchTracker, OpCapture  # noqa: E402
from kbencheval.eval.untrusted.tripwires import Tripwires, poison  # noqa: E402


class Steps:
    def __init__(self, device):
        self.device, self.ms = device, {}

    def __call__(self, name, fn):
        sync(self.device)
        clock = time.perf_counter()
        value = fn()
        sync(self.device)
        self.ms.setdefault(name, []).append((time.perf_counter() - clock) * 1e3)
        return value

    def medians(self) -> dict:
        return {name: round(statistics.median(v), 3) for name, v in self.ms.items()}


def profile_problem(problem, device, tracker, folder: str, small: bool = False, cache_bytes: int = 8 << 30) -> dict:
    seeds = RunSeeds.draw(trials=5, timing_sets=2, seed=0)
    trials = seeds.correctness_trials(stress_names(problem.input_domain))
    sizes = problem.small_sizes if small else {}
    module = load_problem_module(problem.source, sizes)
    judge = Judge(device, cache_bytes)
    prep = judge.prepare(Prepare(problem_source=problem.source, sizes=sizes, model_seeds=seeds.model, trials=trials))
    trials = [t for t in trials if not t.stress or t.key not in prep.not_finite]
    path = Path(folder) / f"{problem.key}.py"
    path.write_text(problem.solution_source)  # @triton.jit reads its source from a file
    spec = importlib.util.spec_from_file_location(f"candidate_{problem.key}", path)
    candidate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(candidate)
    allowed = set(problem.allowed_torch_ops)
    tripwires = Tripwires(tracker, pin_global_flags(), allowed)
    model = build_model(candidate.ModelNew, module, seeds.model, device)
    worker, judged = Steps(device), Steps(device)
    for n, trial in enumerate(trials):
        step = worker if n else Steps(device)  # the first trial compiles: not in the medians
        inputs = step("make_inputs", lambda: make_inputs(module, trial, device))
        step("poison", lambda: poison(device, prep.output_bytes))
        before = step("fingerprint", lambda: inputs_fingerprint(inputs))
        capture = OpCapture(allowed)

        def forward():
            tracker.reset(capture)
            tracker.active = True
            try:
                with torch.no_grad(), capture:
                    return as_tensor_list(model(*inputs))
            finally:
                tracker.active = False

        outs = step("forward", forward)
        if violation := step("process_checks", tripwires.process_violation):
            print(f"{problem.key}: the process checks found {violation!r} (an early return: not their full cost)")
        step("call_checks", lambda: tripwires.call_violation(capture, outs, before, inputs))
        inputs = None
        if device.type == "cuda":  # as run_trials ends: idle blocks over 1 GiB go back to the device
            idle = lambda: torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # noqa: E731
            step("empty_cache", lambda: idle() > 1 << 30 and torch.cuda.empty_cache())
        ref = judged("reference", lambda: judge.reference(trial))
        judged("compare", lambda: compare(ref, outs, dict(problem.tolerance), bool(trial.stress)))
        judged("release_memory", judge.release_memory)
        outs = ref = None
    timing = TimingSpec(enabled=True)
    timer = Timer(model, module, device, timing, seeds.timing[0])
    picks = Steps(device)
    for k in range(6):
        pick = Trial(seed=1000 + k)
        picks("worker_process_checks", tripwires.process_violation)
        # the clone a worker makes for each pick but a request's last
        outs = picks("worker_output_for", lambda: [t.clone() for t in timer.output_for(pick)])
        snapshot = picks("judge_snapshot", lambda: [t.clone() for t in outs])
        ref = picks("judge_reference_uncached", lambda: judge.reference(pick, cache=False))
        picks("judge_compare", lambda: compare(ref, snapshot, dict(problem.tolerance)))
        picks("judge_digest", lambda: output_digest(snapshot, 3).tolist())
        picks("judge_digest_bounds", lambda: digest_bounds(snapshot, judge_kernels.row_squares_fused))
        outs = snapshot = ref = None
    timer = model = judge = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"worker_trial_ms": worker.medians(), "judge_trial_ms": judged.medians(), "pick_ms": picks.medians(),
            "trials": len(trials), "output_mb": round(sum(prep.output_bytes) / 2**20, 1),
            "input_mb": round(prep["input_bytes"] / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--limit", type=int, default=0, help="only the first N problems")
    ap.add_argument("--small", action="store_true", help="the problems' SMALL_SIZES (the CPU interpreter)")
    ap.add_argument("--rotate", type=int, default=0, help="start at the N-th problem (copies run side by side)")
    ap.add_argument("--judge-cache-gb", type=float, default=8.0, help="reference outputs the judge keeps")
    ap.add_argument("--out", default="", help="write the table as JSON here")
    args = ap.parse_args()
    if args.device not in ("cpu", "cuda") and not args.device.startswith("cuda:"):
        ap.error(f"--device {args.device}: use cpu, cuda or cuda:N")
    if args.device != "cpu" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: no GPU here; use --device cpu --small with TRITON_INTERPRET=1")
    device = torch.device(args.device)
    try:
        problems = [p for level in map(int, args.levels.split(",")) for p in load_bundled(level)]
    except (ValueError, ProblemError) as e:
        ap.error(f"--levels {args.levels}: {e}")
    problems = problems[: args.limit] if args.limit else problems
    problems = problems[args.rotate % len(problems):] + problems[: args.rotate % len(problems)]
    tracker = LaunchTracker()
    tracker.install()
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for problem in problems:
            rows[problem.key] = row = profile_problem(problem, device, tracker, folder, args.small,
                                                        int(args.judge_cache_gb * 2**30))
            w, j, p = row["worker_trial_ms"], row["judge_trial_ms"], row["pick_ms"]
            print(f"{problem.key:<32} in {row['input_mb']:>7.1f} MB out {row['output_mb']:>7.1f} MB | worker "
                  + " ".join(f"{k} {v:.2f}" for k, v in w.items()) + f" = {sum(w.values()):.1f} | judge "
                  + " ".join(f"{k} {v:.2f}" for k, v in j.items()) + " | pick "
                  + " ".join(f"{k.split('_', 1)[1]} {v:.2f}" for k, v in p.items()) + f" = {sum(p.values()):.1f}",
                  flush=True)
    totals = {side: {} for side in ("worker_trial_ms", "judge_trial_ms", "pick_ms")}
    for row in rows.values():
        for side, steps in totals.items():
            for k, v in row[side].items():
                steps[k] = round(steps.get(k, 0.0) + v, 2)
    print("sum over problems (ms, one trial / one pick each):", json.dumps(totals))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"device": str(device), "totals_ms": totals, "problems": rows}, indent=1))


if __name__ == "__main__":
    main()
