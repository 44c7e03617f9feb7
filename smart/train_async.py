"""The asynchronous RL loop: step n+1's rollout (generate, evaluate, reward, filter) runs on the engines
while step n trains, within a staleness bound; truncated importance sampling corrects the gap.

    smart rl-async configs/rl_tiny_cpu.yaml train.grpo.tis_clip=2 [max_staleness=1] [key=value ...]
    DRIVER=async bash scripts/run_rl.sh configs/rl_tiny_cpu.yaml train.grpo.tis_clip=2

Staleness of a sample = trainer updates between the weights that generated it (`Sample.weight_version`,
stamped by the rollout manager from the version every engine serves) and the weights that train on it.
A rollout is launched only if its worst-case staleness is <= max_staleness; otherwise the driver first
syncs weights, which waits for the rollouts in flight (the manager and the engines run one call at a
time, so a sync never lands inside a rollout). max_staleness=1 is the one-step-off pipeline:

    rollout(n+1) on the engines  ||  train(n) on the trainer;   then sync(weights after step n)

The trainer recomputes old logprobs with its current weights, so exp(old - rollout logprob) is the
importance weight between the policy being trained and the one that sampled; train.grpo.tis_clip
truncates it (smart/algo/losses.py), and max_staleness > 0 refuses to run without it. Each step also logs
async/staleness_mean|max, async/overlap_s (seconds rollout n ran while step n-1 trained) and
timeline/* (seconds since the loop started). Set-up, resume and teardown are smart/session.py's.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable

import ray

from smart.config import ConfigError, RLConfig
from smart.rollout.engines import sync_weights
from smart.session import RLSession, rl_main, rl_session
from smart.tracking import PhaseTimer, export_policy, save_checkpoint, save_rollouts


@dataclasses.dataclass
class StalenessBound:
    """Which rollouts may be in flight; counts trainer updates (train steps) since the loop started."""

    max_staleness: int
    next_launch: int
    """the first step whose rollout has not been launched"""
    next_train: int
    """the first step not trained yet"""
    updates: int = 0
    """trainer updates so far"""
    served: int = 0
    """updates contained in the weights the engines serve"""

    def worst_staleness(self, step: int) -> int:
        """Staleness of `step`'s samples if generated now and every step before it trains: the engines'
        present lag plus one update per untrained step before it."""
        return (self.updates - self.served) + (step - self.next_train)

    def may_launch(self) -> bool:
        return self.worst_staleness(self.next_launch) <= self.max_staleness

    def sync_helps(self) -> bool:
        """Engines on the trainer's weights would let the next rollout launch."""
        return self.updates > self.served and self.next_launch - self.next_train <= self.max_staleness


def launch_allowed(bound: StalenessBound, num_steps: int, launch: Callable[[int], None],
                   sync: Callable[[], None]) -> int:
    """Launch every rollout the bound allows, syncing weights first when that is what holds the next one
    back; returns the number of syncs. The step about to train is always launched (a sync makes its lag 0)."""
    syncs = 0
    while bound.next_launch < num_steps:
        if not bound.may_launch():
            if not bound.sync_helps():
                break
            sync()
            bound.served, syncs = bound.updates, syncs + 1
            continue
        launch(bound.next_launch)
        bound.next_launch += 1
    return syncs


def sample_staleness(versions: list[int], history: list[int]) -> list[int]:
    """Trainer updates between each sample's weight version and the trainer's present weights, given the
    trainer's versions so far (history[0] at the loop's start, then one per update, history[-1] now)."""
    unknown = sorted(set(versions) - set(history))
    if unknown:
        raise RuntimeError(f"samples carry weight versions {unknown} the trainer never had ({history}); "
                           "engines must be synced from this trainer only")
    return [sum(v > w for v in history) for w in versions]


def check_async(cfg: RLConfig) -> None:
    """What the asynchronous driver needs beyond RLConfig.validate(); one line naming the fix."""
    if cfg.mode != "full" or cfg.replay_dir:
        raise ConfigError(f"smart rl-async overlaps generation with training; mode={cfg.mode} "
                          f"replay_dir={cfg.replay_dir!r} has nothing to overlap: use smart rl")
    if cfg.max_minutes:
        raise ConfigError(f"max_minutes={cfg.max_minutes:g} stops the synchronous driver between steps; the "
                          "asynchronous one has rollouts in flight then: use smart rl, or num_steps")
    grpo = getattr(cfg.train, "grpo", None)
    if cfg.max_staleness > 0 and (grpo is None or grpo.tis_clip <= 0):
        raise ConfigError(f"max_staleness={cfg.max_staleness} trains on samples of older weights and "
                          "train.grpo.tis_clip=0 leaves that uncorrected: set train.grpo.tis_clip=2 (SLIME's "
                          "usual truncation) or max_staleness=0")


def train(cfg: RLConfig) -> dict:
    """Run cfg.num_steps RL steps with rollout and training overlapped; returns the last step's metrics."""
    check_async(cfg)
    with rl_session(cfg) as run:
        return _loop(cfg, run)


def _loop(cfg: RLConfig, run: RLSession) -> dict:
    actor, rollout = run.actor, run.rollout
    bound = StalenessBound(cfg.max_staleness, next_launch=run.start, next_train=run.start)
    history = [actor.weights_version()]  # the trainer's version at the start and after each update
    inflight, data_states = {}, {}
    t0, last_train, metrics = time.time(), None, {}

    def launch(step: int) -> None:
        data_states[step] = rollout.data_state.remote()  # queued first: the draws before this step's
        inflight[step] = rollout.fill.remote(step)

    for step in range(run.start, cfg.num_steps):
        timer = PhaseTimer()
        with timer("sync"):  # includes waiting for rollouts in flight, when the bound makes the driver wait
            syncs = launch_allowed(bound, cfg.num_steps, launch, lambda: sync_weights(actor, rollout))
        with timer("rollout_wait"):
            kept, samples, metrics = ray.get(inflight.pop(step))
        metrics |= _timeline(metrics, t0, last_train) | {"async/syncs": float(syncs)}
        if cfg.save_rollouts:
            save_rollouts(run.out / "rollouts" / f"step_{step:05d}.jsonl", samples)

        last_train = None
        if any(s.trainable for s in kept):
            metrics |= _staleness_metrics(kept, history, cfg.max_staleness)
            started = time.time()
            with timer("train"):
                trained = actor.train_step(kept, cfg.normalize_std, cfg.rollout.group_by, cfg.positive_only)
                metrics |= {f"train/{k}": v for k, v in trained.items()}
            last_train = (started, time.time())
            metrics |= {"timeline/train_start_s": started - t0, "timeline/train_end_s": last_train[1] - t0}
            history.append(actor.weights_version())
            bound.updates += 1
        bound.next_train = step + 1

        last = step + 1 == cfg.num_steps
        if last:  # the engines end on the trainer's final weights (nothing is in flight now)
            with timer("sync"):
                if bound.updates > bound.served:
                    sync_weights(actor, rollout)
                    bound.served = bound.updates
                metrics["async/engines_version_min"] = float(min(ray.get(rollout.weights_versions.remote())))
        metrics |= _eval_and_save(cfg, run, step, timer, data_states)
        metrics |= {"train/weights_version": float(history[-1]), "async/engine_updates_behind": float(bound.updates - bound.served)}
        metrics |= timer.metrics()
        run.tracker.log(step, metrics)
    return metrics


def _timeline(rollout_metrics: dict, t0: float, last_train: tuple[float, float] | None) -> dict:
    """The rollout's wall interval relative to t0, and how long it ran while the previous step trained."""
    start, end = rollout_metrics.pop("clock/rollout_start"), rollout_metrics.pop("clock/rollout_end")
    out = {"timeline/rollout_start_s": start - t0, "timeline/rollout_end_s": end - t0}
    if last_train is not None:
        out["async/overlap_s"] = max(0.0, min(end, last_train[1]) - max(start, last_train[0]))
    return out


def _staleness_metrics(kept: list, history: list[int], max_staleness: int) -> dict:
    stale = sample_staleness([s.weight_version for s in kept], history)
    if max(stale) > max_staleness:  # the bound is the scheduler's promise; breaking it is a bug, not a warning
        raise RuntimeError(f"staleness {max(stale)} exceeds max_staleness={max_staleness}")
    return {"async/staleness_mean": sum(stale) / len(stale), "async/staleness_max": float(max(stale))}


def _eval_and_save(cfg: RLConfig, run: RLSession, step: int, timer: PhaseTimer, data_states: dict) -> dict:
    """Held-out eval (on the weights the engines serve) and the checkpoint, as in smart/train.py."""
    metrics: dict = {}
    if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
        with timer("eval"):  # queued behind the rollouts in flight
            metrics |= ray.get(run.rollout.evaluate_heldout.remote())
    if step + 1 == cfg.num_steps or (cfg.save_every and (step + 1) % cfg.save_every == 0):
        with timer("save"):
            # The data state before the in-flight rollouts drew: a resumed run redraws those steps.
            ref = data_states.get(step + 1)
            data_state = ray.get(ref if ref is not None else run.rollout.data_state.remote())
            save_checkpoint(run.out, step, run.actor, {"data": data_state}, cfg.keep_last_n)
    if cfg.export_hf_every and (step + 1) % cfg.export_hf_every == 0 and step + 1 != cfg.num_steps:
        with timer("save"):
            export_policy(run.out, step, run.actor)
    for done in [s for s in data_states if s <= step + 1]:
        del data_states[done]
    return metrics


def main(argv: list[str] | None = None) -> int:
    return rl_main(sys.argv[1:] if argv is None else argv, "rl-async", train,
                   "smart rl-async configs/rl_tiny_cpu.yaml train.grpo.tis_clip=2 max_staleness=1 num_steps=10")


if __name__ == "__main__":
    sys.exit(main())
