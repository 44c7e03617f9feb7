"""RL step time: `smart rl` (synchronous) against `smart rl-async` (rollout n+1 overlaps training n), same
config, same seed, one after the other in one process.

    python benchmarks/async_step_time.py --out benchmarks/results/async_step_time_cpu.json     # CPU, toy size
    python benchmarks/async_step_time.py --model runs/small-model --steps 8 --max-new-tokens 256 \
        --set cluster.num_gpus_per_worker=1 --out benchmarks/results/async_step_time_h100.json

Without --model a tiny random Qwen3 is built (scripts/make_tiny_model.py). Both drivers run
configs/rl_tiny_cpu.yaml single-turn with a deterministic length reward (a random model writes no
kernel, and the evaluator still runs on every sample), no filter, so every step trains. The first step
of each run is warm-up and left out of the medians. Reported per driver: median step seconds (with
min-max), steps/s, generated tokens/s over the timed steps, and for async the median seconds rollout
n+1 overlapped training n. Ray start-up and model loading are outside the step times.
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


def run(driver: str, model: str, out: Path, args) -> dict:
    from smart.config import RLConfig, load_config

    train = __import__("smart.train_async" if driver == "async" else "smart.train", fromlist=["train"]).train
    cfg = load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", [
        f"model_path={model}", f"out_dir={out}", f"num_steps={args.steps}", "seed=0", "rollout.max_turns=1",
        f"rollout.prompts_per_step={args.prompts}", f"rollout.n_samples_per_prompt={args.group}",
        f"rollout.max_new_tokens={args.max_new_tokens}", "rollout.filter_fn=",
        "reward.reward_fn=smart.reward.controls:length_reward", "train.lr=1e-3", "train.grpo.tis_clip=2",
        "export_hf=false", "save_every=0", "resume=false", *args.set])
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
           "train_s_median": statistics.median(m["time/train"][s] for s in timed)}
    if driver == "async":
        row["overlap_s_median"] = statistics.median(m["async/overlap_s"][s] for s in timed)
        row["staleness_max"] = max(m["async/staleness_max"].values())
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="example: python benchmarks/async_step_time.py "
                                "--out benchmarks/results/async_step_time_cpu.json", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="", help="HF folder; default: build a tiny random Qwen3 (default: %(default)r)")
    p.add_argument("--steps", type=int, default=5, help="RL steps per driver, the first untimed (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step (default: %(default)s)")
    p.add_argument("--group", type=int, default=4, help="samples per prompt (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    p.add_argument("--set", nargs="*", default=[], help="extra key=value overrides for both runs (default: none)")
    p.add_argument("--out", default="", help="JSON file to write (default: print only)")
    args = p.parse_args()
    if args.steps < 2:
        p.error("--steps must be >= 2: the first step of each run is warm-up")

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if not model:
            from tests.support import build_tiny_model

            model = build_tiny_model(Path(tmp) / "tiny-model")
        rows = [run(driver, model, Path(tmp) / driver, args) for driver in ("sync", "async")]

    print(f"{'driver':<7} {'step s (median)':>16} {'min-max':>13} {'steps/s':>8} {'gen tok/s':>10} {'train s':>8} {'overlap s':>10}")
    for r in rows:
        print(f"{r['driver']:<7} {r['step_s_median']:>16.3f} {r['step_s_min']:>6.3f}-{r['step_s_max']:<6.3f} "
              f"{r['steps_per_s']:>8.2f} {r['generated_tokens_per_s']:>10.0f} {r['train_s_median']:>8.3f} "
              f"{r.get('overlap_s_median', 0.0):>10.3f}")
    speedup = rows[0]["step_s_median"] / rows[1]["step_s_median"]
    print(f"async / sync step-time speed-up (medians): {speedup:.2f}x")
    if args.out:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({platform.processor() or platform.machine()})"
        result = {"device": device, "cpu_cores": os.cpu_count(), "args": vars(args), "rows": rows, "speedup_median": speedup}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
