"""Where a trusted timing iteration's wall time goes, outside the timed kernel (GPU only).

    python benchmarks/probes/timing_loop_profile.py --out runs/probes/timing_loop_profile.json

The exclusive timing window holds the device alone, so every millisecond of a round that is not the
timed kernel is a millisecond no other candidate can be timed in. For a few bundled problems this
builds the judge's `Timer` on the reference and times, per iteration, each step of `Timer.run` with a
device sync after it: fresh inputs (`fresh_inputs`, regenerated in place; and for comparison the old
way, `make_inputs` and `copy_to_static`), the L2 flush, the timed replay (events), the output digest
(read at once here; the loop reads a round's digests together), and the whole `Timer.run` per
iteration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kbencheval.dataset import load_bundled  # noqa: E402
from kbencheval.eval.contract.inputs import build_model, load_problem_module, make_inputs, output_digest  # noqa: E402
from kbencheval.eval.contract.protocol import TimingSpec, Trial  # noqa: E402
from kbencheval.eval.contract.timing import Timer  # noqa: E402

PROBLEMS = ["L1_1_ReLU", "L1_6_Softmax", "L1_15_SquareMatmul", "L2_2_Gemm_GELU_ResidualAdd", "L3_2_AttentionBlock"]


def step_times(timer: Timer, trials: list[Trial], device) -> dict:
    """Median ms per step over `trials`, each step followed by a sync (so steps do not overlap)."""
    steps: dict[str, list[float]] = {}

    def timed(name, fn):
        torch.cuda.synchronize(device)
        t = time.perf_counter()
        value = fn()
        torch.cuda.synchronize(device)
        steps.setdefault(name, []).append((time.perf_counter() - t) * 1e3)
        return value

    for trial in trials:
        # What iterations did before fresh_inputs.FreshInputs (a new set, copied over), kept for comparison ...
        fresh = timed("make_inputs", lambda: make_inputs(timer.module, trial, device))
        timed("copy_to_static", lambda: [s.copy_(v) for s, v in zip(timer.static_in, fresh) if isinstance(s, torch.Tensor)])
        del fresh
        # ... and what they do now: the inputs regenerated in place (a graph replay where it applies).
        timed("fresh_inputs", lambda: timer.fresh.load(trial))
        timed("l2_flush", lambda: timer.flush.zero_())
        out = timed("replay", timer._call)
        timed("digest", lambda: output_digest(out, 7).tolist())
    return {name: round(statistics.median(v), 3) for name, v in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/probes/timing_loop_profile.json")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--problems", default=",".join(PROBLEMS),
                        help="comma-separated bundled problem keys, or 'all'")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA or ROCm GPU: it profiles the GPU timing loop (run it on the GPU machine)")
    device = torch.device("cuda:0")
    problems = {p.key: p for level in (1, 2, 3) for p in load_bundled(level)}
    rows = []
    for key in (sorted(problems) if args.problems == "all" else args.problems.split(",")):
        problem = problems[key]
        module = load_problem_module(problem.source, {})
        model = build_model(module.Model, module, {"init": 1, "model": 2}, device)
        spec = TimingSpec(enabled=True, iters=args.iters)
        timer = Timer(model, module, device, spec, Trial(seed=3))
        trials = [Trial(seed=100 + i) for i in range(args.iters)]
        steps = step_times(timer, trials, device)
        torch.cuda.synchronize(device)
        t = time.perf_counter()
        timer.run(trials)
        steps["timer_run_per_iter"] = round((time.perf_counter() - t) * 1e3 / len(trials), 3)
        in_mb = sum(t.numel() * t.element_size() for t in timer.static_in if isinstance(t, torch.Tensor)) / 2**20
        rows.append({"problem": key, "mechanism": timer.mechanism, "fresh_inputs_by": timer.fresh.mechanism,
                     "inputs_mb": round(in_mb, 1), **steps})
        del timer, model
        torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(device), "rows": rows}, indent=1))
    names = [k for k in rows[0] if k not in ("problem", "mechanism", "fresh_inputs_by")]
    names = [n for n in names if n != "inputs_mb"] + ["inputs_mb"]
    print("ms per iteration (median):")
    print(f"{'problem':28s}" + "".join(f"{n[:14]:>15s}" for n in names))
    for row in rows:
        print(f"{row['problem'][:28]:28s}" + "".join(f"{row[n]:15.3f}" for n in names))


if __name__ == "__main__":
    main()
