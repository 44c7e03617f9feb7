"""The synchronous RL loop: rollout (generate, evaluate, reward) -> train -> sync weights -> eval / save.

    smart rl configs/rl_tiny_cpu.yaml [key=value ...]
    smart rl configs/rl_tiny_cpu.yaml mode=rollout_only                  # no trainer: sample and score
    smart rl configs/rl_tiny_cpu.yaml mode=train_only replay_dir=RUN/rollouts   # no engines
    smart rl configs/rl_tiny_cpu.yaml replay_dir=RUN/rollouts            # replay saved rollouts

Each step reads top to bottom as plain calls on actor handles; overlap of rollout and training
is the separate driver smart/train_async.py (`smart rl-async`). Start-up and teardown: smart/session.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import ray

from smart.config import RLConfig
from smart.ray.actor_group import TrainGroup
from smart.rollout.engines import sync_weights
from smart.rollout.filters import filter_groups
from smart.rollout.refill import fill_groups
from smart.session import rl_main, rl_session
from smart.tracking import (PhaseTimer, Tracker, export_policy, load_rollouts, replay_file, save_checkpoint,
                            save_rollouts)


def train(cfg: RLConfig) -> dict:
    """Run cfg.num_steps RL steps (resuming if a checkpoint exists); returns the last step's metrics."""
    with rl_session(cfg) as run:
        return loop(cfg, run.out, run.start, run.actor, run.rollout, run.filter_fn, run.tracker)


def loop(cfg: RLConfig, out: Path, start: int, actor: TrainGroup | None, rollout, filter_fn, tracker: Tracker) -> dict:
    """Steps start..cfg.num_steps with the given actors (`train` makes them from cfg); a caller may pass
    its own actor and tracker, or no rollout with cfg.replay_dir set, to run one half alone."""
    metrics: dict = {}
    rc = cfg.rollout
    started = time.monotonic()
    for step in range(start, cfg.num_steps):
        timer = PhaseTimer()
        metrics = {}
        # 1. rollout: generate, evaluate, reward (multi-turn generate functions also evaluate between turns)
        with timer("rollout"):
            if cfg.replay_dir:
                kept, dropped = filter_groups(load_rollouts(replay_file(cfg.replay_dir, step)), filter_fn, rc.group_by)
                metrics |= {"filter/dropped_groups": float(dropped), "filter/kept_samples": float(len(kept))}
            else:  # groups the filter drops are refilled with new prompts, at most refill_max_rounds times
                draw = lambda n: ray.get(rollout.rollout.remote(step, n))  # noqa: E731
                kept, samples, rollout_metrics = fill_groups(draw, filter_fn, rc.prompts_per_step, rc.refill_max_rounds, rc.group_by)
                metrics |= rollout_metrics
                if cfg.save_rollouts:
                    save_rollouts(out / "rollouts" / f"step_{step:05d}.jsonl", samples)

        # 2. train (advantages, old logprobs once, num_steps_per_rollout updates), 3. sync weights
        if actor and any(s.trainable for s in kept):
            with timer("train"):
                trained = actor.train_step(kept, cfg.normalize_std, rc.group_by, cfg.positive_only)
                metrics |= {f"train/{k}": v for k, v in trained.items()}
            if rollout:
                with timer("sync"):
                    metrics["train/weights_version"] = float(sync_weights(actor, rollout))

        # 4. eval / save
        if rollout and cfg.eval_every and (step + 1) % cfg.eval_every == 0:
            with timer("eval"):
                metrics |= ray.get(rollout.evaluate_heldout.remote())
        out_of_time = cfg.max_minutes > 0 and time.monotonic() - started >= 60 * cfg.max_minutes
        last = step + 1 == cfg.num_steps or out_of_time
        if actor and (last or (cfg.save_every and (step + 1) % cfg.save_every == 0)):
            with timer("save"):
                data_state = ray.get(rollout.data_state.remote()) if rollout else None
                save_checkpoint(out, step, actor, {"data": data_state}, cfg.keep_last_n)
        if actor and cfg.export_hf_every and (step + 1) % cfg.export_hf_every == 0 and not last:
            with timer("save"):  # the last step's policy goes to out/hf
                export_policy(out, step, actor)
        metrics |= timer.metrics()
        tracker.log(step, metrics)
        if out_of_time and not step + 1 == cfg.num_steps:
            print(f"smart rl: max_minutes={cfg.max_minutes:g} reached; stopped after step {step + 1} of {cfg.num_steps}",
                  file=sys.stderr)
            break
    return metrics


def main(argv: list[str] | None = None) -> int:
    return rl_main(sys.argv[1:] if argv is None else argv, "rl", train,
                   "smart rl configs/rl_tiny_cpu.yaml rollout.max_turns=3 reward.preset=kevin num_steps=10")


if __name__ == "__main__":
    sys.exit(main())
