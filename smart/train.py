"""The synchronous RL loop: rollout (generate, evaluate, reward) -> train -> sync weights -> eval / save.

    smart rl configs/rl_tiny_cpu.yaml [key=value ...]
    smart rl configs/rl_tiny_cpu.yaml mode=rollout_only                  # no trainer: sample and score
    smart rl configs/rl_tiny_cpu.yaml mode=train_only replay_dir=RUN/rollouts   # no engines
    smart rl configs/rl_tiny_cpu.yaml replay_dir=RUN/rollouts            # replay saved rollouts

Each step reads top to bottom as plain calls on actor handles; overlap of rollout and training
belongs in a separate driver.
"""

from __future__ import annotations

import sys
from pathlib import Path

import ray

from kbencheval.config import config_help, wants_help
from smart.config import RLConfig, check_model_path, load_config, load_plugin
from smart.ray.actor_group import TrainGroup
from smart.ray.placement import make_placement
from smart.ray.rollout_manager import RolloutManager
from smart.rollout.engines import engine_kind, sync_weights
from smart.rollout.filters import filter_groups
from smart.rollout.refill import fill_groups
from smart.tracking import (PhaseTimer, Tracker, init_ray, latest_checkpoint, load_rollouts, read_run_state,
                            replay_file, save_checkpoint, save_rollouts, seed_everything)


def train(cfg: RLConfig) -> dict:
    """Run cfg.num_steps RL steps (resuming if a checkpoint exists); returns the last step's metrics."""
    seed_everything(cfg.seed)
    started_ray = init_ray(cfg.cluster)
    out = Path(cfg.out_dir)
    ckpt = latest_checkpoint(out) if cfg.resume else None
    state = read_run_state(ckpt)
    need_actor, need_rollout = cfg.mode != "rollout_only", cfg.mode != "train_only"
    gpu_eval = cfg.reward.num_workers if cfg.reward.num_gpus_per_worker and need_rollout else 0
    engines_need_slots = need_rollout and engine_kind(cfg.rollout.engine).needs_slots
    placement = make_placement(cfg.cluster, need_actor, engines_need_slots, gpu_eval)
    actor = TrainGroup.for_run(cfg, placement.actor) if need_actor else None
    rollout = RolloutManager.remote(cfg, placement.rollout, state.get("data"), placement.reward) if need_rollout else None
    if ckpt and actor:
        actor.load_checkpoint(str(ckpt / "trainer"))
    filter_fn = load_plugin(cfg.rollout.filter_fn, "rollout.filter_fn") if cfg.rollout.filter_fn else None
    tracker = Tracker(out, cfg.num_steps, "rl")
    if actor and rollout:
        sync_weights(actor, rollout)  # engines start from the trainer's (possibly resumed) weights

    metrics: dict = {}
    try:
        metrics = _loop(cfg, out, state["next_step"], actor, rollout, filter_fn, tracker)
        if actor and cfg.export_hf:
            actor.export_hf(str(out / "hf"))
    finally:
        tracker.close()
        if rollout:
            ray.get(rollout.shutdown.remote())
            ray.kill(rollout)
        if actor:
            actor.shutdown()
        ray.util.remove_placement_group(placement.pg)
        if started_ray:
            ray.shutdown()
    return metrics


def _loop(cfg: RLConfig, out: Path, start: int, actor: TrainGroup | None, rollout, filter_fn, tracker: Tracker) -> dict:
    metrics: dict = {}
    rc = cfg.rollout
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
                metrics |= {f"train/{k}": v for k, v in actor.train_step(kept, cfg.normalize_std, rc.group_by).items()}
            if rollout:
                with timer("sync"):
                    metrics["train/weights_version"] = float(sync_weights(actor, rollout))

        # 4. eval / save
        if rollout and cfg.eval_every and (step + 1) % cfg.eval_every == 0:
            with timer("eval"):
                metrics |= ray.get(rollout.evaluate_heldout.remote())
        last = step + 1 == cfg.num_steps
        if actor and (last or (cfg.save_every and (step + 1) % cfg.save_every == 0)):
            with timer("save"):
                data_state = ray.get(rollout.data_state.remote()) if rollout else None
                save_checkpoint(out, step, actor, {"data": data_state}, cfg.keep_last_n)
        metrics |= timer.metrics()
        tracker.log(step, metrics)
    return metrics


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print(config_help(RLConfig, "smart rl CONFIG.yaml [key=value ...]   (or bash scripts/run_rl.sh ...)",
                          "smart rl configs/rl_tiny_cpu.yaml rollout.max_turns=3 reward.preset=kevin num_steps=10"))
        return 0
    if not argv or argv[0].startswith("-"):
        print("usage: smart rl CONFIG.yaml [key=value ...]  (smart rl --help lists every key)", file=sys.stderr)
        return 2
    cfg = load_config(RLConfig, argv[0], argv[1:])
    if cfg.mode != "train_only":
        check_model_path(cfg.model_path)
        engine_kind(cfg.rollout.engine).preflight(cfg)  # one clear line before Ray starts
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
