"""What both RL drivers share: start a run (Ray, placement, trainer, rollout manager, resume) and stop it,
and the `smart rl` / `smart rl-async` command line.

    with rl_session(cfg) as run:            # RLSession: actor, rollout, filter_fn, tracker, start step
        metrics = loop(cfg, run)            # smart/train.py or smart/train_async.py
    sys.exit(rl_main(argv, "rl", train))

On a normal exit the final policy is exported (export_hf); on any exit the actors, the placement group
and (if this run started it) Ray are torn down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import ray

from kbencheval.config import config_help, wants_help
from smart.config import RLConfig, check_model_path, load_config, load_plugin
from smart.ray.actor_group import TrainGroup
from smart.ray.placement import make_placement
from smart.ray.rollout_manager import RolloutManager
from smart.rollout.engines import engine_kind, sync_weights
from smart.tracking import (Tracker, done_message, finished_message, finished_step, init_ray, latest_checkpoint,
                            progress, read_run_state, seed_everything)


@dataclasses.dataclass
class RLSession:
    out: Path
    start: int
    """the first step to run (0, or the resumed checkpoint's next_step)"""
    actor: TrainGroup | None
    """None in mode=rollout_only"""
    rollout: Any
    """the RolloutManager actor handle; None in mode=train_only"""
    filter_fn: Callable | None
    tracker: Tracker


@contextlib.contextmanager
def rl_session(cfg: RLConfig) -> Iterator[RLSession]:
    """Start everything a run needs (resuming if a checkpoint exists); engines start from the trainer's weights."""
    seed_everything(cfg.seed)
    started_ray = init_ray(cfg.cluster)
    progress("rl", "Ray up")
    out = Path(cfg.out_dir)
    ckpt = latest_checkpoint(out) if cfg.resume else None
    state = read_run_state(ckpt)
    need_actor, need_rollout = cfg.mode != "rollout_only", cfg.mode != "train_only"
    placement = make_placement(cfg.cluster, *placement_request(cfg))
    actor = TrainGroup.for_run(cfg, placement.actor) if need_actor else None
    rollout = RolloutManager.remote(cfg, placement.rollout, state.get("data"), placement.reward) if need_rollout else None
    if ckpt and actor:
        actor.load_checkpoint(str(ckpt / "trainer"))
    if actor:
        progress("rl", f"trainer loaded {cfg.model_path or 'the checkpoint'}"
                 + (f"; resuming at step {state['next_step']}" if ckpt else ""))
    filter_fn = load_plugin(cfg.rollout.filter_fn, "rollout.filter_fn") if cfg.rollout.filter_fn else None
    tracker = Tracker(out, cfg.num_steps, "rl", every_step=True, tracking=cfg.tracking, config=dataclasses.asdict(cfg),
                      start_step=state["next_step"])
    try:
        if actor and rollout:
            sync_weights(actor, rollout)  # engines start from the trainer's (possibly resumed) weights
        if rollout:
            progress("rl", f"{cfg.cluster.rollout_num_engines} rollout engine(s) ready and {cfg.reward.eval_actors} "
                     f"evaluator worker(s) starting; step 1 of {cfg.num_steps} generates, evaluates and trains")
        yield RLSession(out, state["next_step"], actor, rollout, filter_fn, tracker)
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


def placement_request(cfg: RLConfig) -> tuple[bool, bool, int]:
    """make_placement's (need_actor, need_rollout, reward_gpu_workers) for this run: engines that are
    servers elsewhere (SGLang) take no bundle, and eval actors reserve GPUs only when they use one."""
    need_actor, need_rollout = cfg.mode != "rollout_only", cfg.mode != "train_only"
    gpu_eval = cfg.reward.eval_actors if cfg.reward.gpus_per_eval_actor and need_rollout else 0
    return need_actor, need_rollout and engine_kind(cfg.rollout.engine).needs_slots, gpu_eval


def rl_main(argv: list[str], command: str, train: Callable[[RLConfig], dict], example: str) -> int:
    """`smart <command> CONFIG.yaml [key=value ...]`: --help, usage, config, preflight, then train(cfg)."""
    usage = f"smart {command} CONFIG.yaml [key=value ...]"
    if wants_help(argv):
        print(config_help(RLConfig, f"{usage}   (or bash scripts/run_rl.sh ...)", example))
        return 0
    if not argv or argv[0].startswith("-"):
        print(f"usage: {usage}  (smart {command} --help lists every key)", file=sys.stderr)
        return 2
    cfg = load_config(RLConfig, argv[0], argv[1:])
    done = finished_step(Path(cfg.out_dir), cfg.num_steps, cfg.export_hf) if cfg.resume else None
    if done is not None:  # before Ray and the models: a rerun of a finished run has nothing to do
        print(finished_message(cfg.out_dir, done, cfg.num_steps))
        return 0
    if cfg.mode != "train_only":
        check_model_path(cfg.model_path)
        engine_kind(cfg.rollout.engine).preflight(cfg)  # one clear line before Ray starts
    train(cfg)
    print(done_message("RL", cfg.out_dir))
    return 0
