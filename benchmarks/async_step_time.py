"""RL step time: `smart rl` (synchronous) against `smart rl-async` (rollout n+1 overlaps training n), same
config, same seed, one after the other in one process.

    python benchmarks/async_step_time.py --out benchmarks/results/async_step_time_cpu.json     # CPU, toy size
    python benchmarks/async_step_time.py --device cuda --vocab-size 4096 --hidden 512 --layers 8 --prompts 4 \
        --group 8 --max-new-tokens 256 --steps 6 --out benchmarks/results/async_step_time_h100.json   # one GPU

Without --model a random Qwen3 is built (scripts/make_tiny_model.py; tiny by default, the GPU line above
is the learning run's shape, configs/learn_synth_gpu.yaml). Both drivers run configs/rl_tiny_cpu.yaml
single-turn with a deterministic length reward (a random model writes no kernel, and the evaluator still
runs on every sample, on CPU under the Triton interpreter), no filter, so every step trains.

--device cuda: trainer (bf16 compute) and embedded engine (bf16) on one GPU, colocated in one bundle:
on one GPU that is the only placement (colocate=false needs a bundle, a GPU, for each). The two actors
are separate processes, so rollout n+1 and training n time-share the GPU; what async can win there is
the time either side leaves the GPU idle (host work, the CPU evaluator, launch gaps), not the overlap of
two devices. --device cpu pins the trainer to the CPU as well.

The first step of each run is warm-up and left out of the medians. Reported per driver: median step
seconds (with min-max), steps/s, generated tokens/s over the timed steps, the median of every time/*
scalar (time_s_median), and for async the median seconds rollout n+1 overlapped training n. Ray
start-up and model loading are outside the step times. Each driver's row is written as soon as it ends,
and a driver that fails leaves an error row, not an empty file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _scalars(out: Path) -> dict[str, dict[int, float]]:
    from smart.tracking import read_scalars

    return read_scalars(out / "tb")


DEVICE_OVERRIDES = {
    # Ray leaves CUDA_VISIBLE_DEVICES alone for actors without a GPU share, so on a GPU machine
    # train.device=auto would put a "CPU" trainer on the GPU.
    "cpu": ["cluster.gpus_per_bundle=0", "train.device=cpu"],
    # The engine follows cluster.gpus_per_bundle (device cuda, dtype auto = bf16); the evaluator stays on CPU.
    "cuda": ["cluster.gpus_per_bundle=1", "cluster.colocate=true", "train.dtype=bf16"],
}


def overrides(args, model: str, out: Path) -> list[str]:
    """configs/rl_tiny_cpu.yaml's overrides for one driver's run; --set comes last and wins."""
    return [f"model_path={model}", f"out_dir={out}", f"num_steps={args.steps}", "seed=0", "rollout.max_turns=1",
            f"rollout.prompts_per_step={args.prompts}", f"rollout.n_samples_per_prompt={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.filter_fn=",
            "reward.reward_fn=smart.reward.controls:length_reward", "train.lr=1e-3", "train.grpo.tis_clip=2",
            "export_hf=false", "save_every=0", "resume=false", *DEVICE_OVERRIDES[args.device], *args.set]


def run(driver: str, model: str, out: Path, args) -> dict:
    from smart.config import RLConfig, load_config

    train = __import__("smart.train_async" if driver == "async" else "smart.train", fromlist=["train"]).train
    cfg = load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", overrides(args, model, out))
    t0 = time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - t0
    m = _scalars(out)
    timed = sorted(m["time/step"])[1:]  # step 0 warms up
    steps = [m["time/step"][s] for s in timed]
    tokens = sum(m["rollout/generated_tokens"][s] for s in timed)
    row = {"driver": driver, "steps_timed": len(steps), "step_s_median": statistics.median(steps),
           "step_s_min": min(steps), "step_s_max": max(steps), "steps_per_s": len(steps) / sum(steps),
           "generated_tokens_per_s": tokens / sum(steps), "run_wall_s": wall,
           "train_s_median": statistics.median(m["time/train"][s] for s in timed),
           "time_s_median": {k.removeprefix("time/"): statistics.median(v[s] for s in timed)
                              for k, v in m.items() if k.startswith("time/") and all(s in v for s in timed)}}
    if driver == "async":
        row["overlap_s_median"] = statistics.median(m["async/overlap_s"][s] for s in timed)
        row["staleness_max"] = max(m["async/staleness_max"].values())
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="example: python benchmarks/async_step_time.py "
                                "--out benchmarks/results/async_step_time_cpu.json", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=sorted(DEVICE_OVERRIDES),
                   help="cuda: trainer and engine on one GPU (default: %(default)s)")
    p.add_argument("--model", default="", help="HF folder; default: build a random Qwen3 (default: %(default)r)")
    p.add_argument("--vocab-size", type=int, default=1024, help="random model's tokenizer (default: %(default)s)")
    p.add_argument("--hidden", type=int, default=64, help="random model (default: %(default)s)")
    p.add_argument("--layers", type=int, default=2, help="random model (default: %(default)s)")
    p.add_argument("--steps", type=int, default=5, help="RL steps per driver, the first untimed (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step (default: %(default)s)")
    p.add_argument("--group", type=int, default=4, help="samples per prompt (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--set", nargs="*", default=[], help="extra key=value overrides for both runs (default: none)")
    p.add_argument("--out", default="", help="JSON file to write (default: print only)")
    args = p.parse_args(argv)
    if args.steps < 2:
        p.error("--steps must be >= 2: the first step of each run is warm-up")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch sees no GPU; run on a GPU machine or leave --device cpu")

    device = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu ({platform.processor() or platform.machine()})"
    result = {"device": device, "cpu_cores": os.cpu_count(), "args": vars(args),
              "overrides": overrides(args, "MODEL", Path("OUT"))[2:], "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if not model:
            from tests.support import build_tiny_model

            model = build_tiny_model(Path(tmp) / "model", vocab_size=args.vocab_size, hidden=args.hidden, layers=args.layers)
        for driver in ("sync", "async"):
            try:
                result["rows"].append(run(driver, model, Path(tmp) / driver, args))
            except Exception as exc:  # keep the other driver's figures (GPU time is scarce)
                result["rows"].append({"driver": driver, "error": f"{exc.__class__.__name__}: {exc}"[-1500:]})
            write(result, args.out)  # after each driver: a run killed at its time limit keeps the first

    rows = [r for r in result["rows"] if "error" not in r]
    print(f"{'driver':<7} {'step s (median)':>16} {'min-max':>13} {'steps/s':>8} {'gen tok/s':>10} {'train s':>8} {'overlap s':>10}")
    for r in result["rows"]:
        if "error" in r:
            print(f"{r['driver']:<7} failed: {r['error']}")
            continue
        print(f"{r['driver']:<7} {r['step_s_median']:>16.3f} {r['step_s_min']:>6.3f}-{r['step_s_max']:<6.3f} "
              f"{r['steps_per_s']:>8.2f} {r['generated_tokens_per_s']:>10.0f} {r['train_s_median']:>8.3f} "
              f"{r.get('overlap_s_median', 0.0):>10.3f}")
    if len(rows) < 2:
        return 1
    result["speedup_median"] = rows[0]["step_s_median"] / rows[1]["step_s_median"]
    write(result, args.out)
    print(f"async / sync step-time speed-up (medians): {result['speedup_median']:.2f}x on {device}")
    return 0


def write(result: dict, out: str) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
