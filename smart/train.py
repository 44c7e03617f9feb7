"""The synchronous RL loop: generate -> reward -> train -> sync weights -> eval / save.

    smart rl configs/rl_tiny_cpu.yaml [key=value ...]
    smart rl configs/rl_tiny_cpu.yaml mode=rollout_only                  # no trainer: sample and score
    smart rl configs/rl_tiny_cpu.yaml mode=train_only replay_dir=RUN/rollouts   # no engines
    smart rl configs/rl_tiny_cpu.yaml replay_dir=RUN/rollouts            # replay saved rollouts

Each step reads top to bottom as plain calls on actor handles; overlap of rollout and training
belongs in a separate driver.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import ray
import torch

from smart.algo import group_advantages
from smart.config import RLConfig, check_model_path, load_config, load_plugin
from smart.ray.actor_group import TrainGroup, train_config_for
from smart.ray.placement import make_placement
from smart.ray.rollout_manager import RolloutManager
from smart.rollout.engines.sglang import check_server
from smart.rollout.filters import filter_groups, groups_of
from smart.sample import Sample
from smart.tracking import (PhaseTimer, Tracker, init_ray, latest_checkpoint, load_rollouts, read_run_state,
                            replay_file, save_checkpoint, save_rollouts)


def train(cfg: RLConfig) -> dict:
    """Run cfg.num_steps RL steps (resuming if a checkpoint exists); returns the last step's metrics."""
    started_ray = init_ray(cfg.cluster)
    out = Path(cfg.out_dir)
    ckpt = latest_checkpoint(out) if cfg.resume else None
    state = read_run_state(ckpt)
    need_actor, need_rollout = cfg.mode != "rollout_only", cfg.mode != "train_only"
    gpu_eval = cfg.reward.num_workers if cfg.reward.num_gpus_per_worker and need_rollout else 0
    # SGLang engines are servers elsewhere: only embedded engines need bundles here.
    placement = make_placement(cfg.cluster, need_actor, need_rollout and cfg.rollout.engine == "embedded", gpu_eval)
    actor = TrainGroup(train_config_for(cfg.train, cfg.model_path), placement.actor) if need_actor else None
    rollout = RolloutManager.remote(cfg, placement.rollout, state.get("data"), placement.reward) if need_rollout else None
    if ckpt and actor:
        actor.load_checkpoint(str(ckpt / "trainer"))
    filter_fn = load_plugin(cfg.rollout.filter_fn, "rollout.filter_fn") if cfg.rollout.filter_fn else None
    tracker = Tracker(out, cfg.num_steps, "rl")
    if actor and rollout:
        sync_weights(actor, rollout, _disk_dir(cfg, out))  # engines start from the trainer's (possibly resumed) weights

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
    for step in range(start, cfg.num_steps):
        timer = PhaseTimer()
        metrics = {}
        # 1. generate (multi-turn generate functions also evaluate between turns)
        with timer("generate"):
            if cfg.replay_dir:
                samples = load_rollouts(replay_file(cfg.replay_dir, step))
            else:
                samples, gen_metrics = ray.get(rollout.generate.remote(step))
                metrics |= gen_metrics
        # 2. reward: evaluate what is not evaluated yet, shape, discount
        with timer("reward"):
            if not cfg.replay_dir:
                samples, reward_metrics = ray.get(rollout.reward.remote(samples))
                metrics |= reward_metrics
        if cfg.save_rollouts and not cfg.replay_dir:
            save_rollouts(out / "rollouts" / f"step_{step:05d}.jsonl", samples)
        kept, dropped = filter_groups(samples, filter_fn)
        metrics |= {"filter/dropped_groups": float(dropped), "filter/kept_samples": float(len(kept))}

        # 3. train, 4. sync weights
        if actor and any(s.trainable for s in kept):
            with timer("train"):
                advantages = compute_advantages(kept, cfg.normalize_std)
                old_logprobs = actor.compute_logprobs(kept)
                metrics |= {f"train/{k}": v for k, v in actor.train_grpo(kept, advantages, old_logprobs).items()}
                metrics["train/rollout_logprob_abs_diff"] = logprob_mismatch(kept, old_logprobs)
            if rollout:
                with timer("sync"):
                    metrics["train/weights_version"] = float(sync_weights(actor, rollout, _disk_dir(cfg, out)))

        # 5. eval / save
        if rollout and cfg.eval_every and (step + 1) % cfg.eval_every == 0:
            with timer("eval"):
                metrics |= ray.get(rollout.evaluate_heldout.remote())
        last = step + 1 == cfg.num_steps
        if actor and (last or (cfg.save_every and (step + 1) % cfg.save_every == 0)):
            with timer("save"):
                data_state = ray.get(rollout.data_state.remote()) if rollout else None
                save_checkpoint(out, step, actor, {"data": data_state})
        metrics |= timer.metrics()
        tracker.log(step, metrics)
    return metrics


def sync_weights(actor: TrainGroup, rollout, disk_dir: Path | None = None) -> int:
    """Push the trainer's weights to every engine, tagged with the trainer's version; returns it.

    disk_dir=None: through the object store (embedded engines). Otherwise a save_pretrained folder
    disk_dir/vN that the SGLang servers load; the previous folders are removed once all engines took it.
    """
    version = actor.weights_version()
    if disk_dir is None:
        weights = [actor.weights_ref()]
    else:
        folder = (disk_dir / f"v{version:06d}").resolve()
        actor.export_hf(str(folder))
        weights = str(folder)
    versions = ray.get(rollout.update_weights.remote(weights, version))
    if set(versions) != {version}:
        raise RuntimeError(f"engines report weights versions {versions} after syncing version {version}")
    if disk_dir is not None:
        for old in disk_dir.glob("v*"):
            if old.name != f"v{version:06d}":
                shutil.rmtree(old, ignore_errors=True)
    return version


def _disk_dir(cfg: RLConfig, out: Path) -> Path | None:
    """Where SGLang servers read new weights from; None: embedded engines use the object store."""
    return out / "engine_weights" if cfg.rollout.engine == "sglang" else None


def compute_advantages(samples: list[Sample], normalize_std: bool) -> list[float]:
    """GRPO advantages within each group (all turns of a group's trajectories form one group)."""
    adv_by_index: dict[int, float] = {}
    for group in groups_of(samples).values():
        rewards = torch.tensor([float(s.reward) for s in group])
        for s, a in zip(group, group_advantages(rewards, len(group), normalize_std).tolist()):
            adv_by_index[id(s)] = a
    return [adv_by_index[id(s)] for s in samples]


def logprob_mismatch(samples: list[Sample], logprobs: list[list[float]]) -> float:
    """Mean |engine logprob - trainer logprob| over trained tokens: near 0 when no token was re-tokenized."""
    diffs = [abs(a - b) for s, lp in zip(samples, logprobs) if s.trainable
             for a, b, m in zip(s.rollout_logprobs, lp, s.loss_mask) if m]
    return sum(diffs) / max(len(diffs), 1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print("usage: smart rl CONFIG.yaml [key=value ...]", file=sys.stderr)
        return 2
    cfg = load_config(RLConfig, argv[0], argv[1:])
    if cfg.mode != "train_only":
        check_model_path(cfg.model_path)
        if cfg.rollout.engine == "sglang":
            for url in cfg.rollout.sglang_urls:
                check_server(url)  # one clear line before Ray starts
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
