"""Rollout engines: one protocol, chosen by `rollout.engine`; the driver never names one.

    kind = engine_kind(cfg.rollout.engine)      # "embedded" | "sglang"
    kind.preflight(cfg)                         # before Ray starts: e.g. every SGLang server answers
    engines = kind.start(cfg, slots)            # Ray actor handles that implement `Engine`
    sync_weights(trainer, rollout_manager)      # trainer -> every engine, tagged with a version
    EngineFleet(kind, cfg, slots).check()       # between steps: restart or drop dead engines (health.py)

An engine owns generation and its own weight sync: `push(weights, version)` takes whatever its
`WeightSink` packed on the trainer side (a state-dict object ref for embedded engines; for SGLang
servers a save_pretrained folder, a state-dict ref or a broadcast plan, per rollout.sglang_weight_sync). Heavy or optional dependencies load only inside the
engine's module, when its kind is asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Literal, Protocol

import ray

from kbencheval.config import ConfigError
from kbencheval.llm.base import Completion, SamplingParams


class Engine(Protocol):
    """What the rollout manager calls on each engine actor (through `.remote`)."""

    def generate_ids(self, prompt_ids_batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One continuation per prompt (row i uses seed + i); token ids and logprobs are the engine's own."""

    def push(self, weights: Any, version: int) -> int:
        """Load new weights (as packed by this kind's WeightSink); returns the version now served."""

    def weights_version(self) -> int: ...

    def state_dict(self) -> dict:
        """The served weights (CPU tensors), for equality checks; engines that cannot say so raise."""

    def health(self, timeout_s: float) -> None:
        """Raise unless the engine can serve (e.g. its server answers /health); a dead actor raises by itself."""

    def retire(self) -> None:
        """Called before a dead engine is dropped: release what it holds outside its actor (a router entry)."""

    def close(self) -> None:
        """Called when the run ends: release what weight sync holds outside the actor (a broadcast group)."""


class WeightSink(Protocol):
    """Trainer-side half of a weight sync: turns the trainer's weights into what `Engine.push` takes."""

    def pack(self, trainer, version: int) -> Any: ...

    def release(self, version: int) -> None:
        """Called once every engine serves `version`: free what older versions left behind."""


@dataclasses.dataclass(frozen=True)
class EngineKind:
    needs_slots: bool
    """True: engines are actors on the run's placement group (rollout bundles). False: they only
    talk to servers that run elsewhere."""
    preflight: Callable[[Any], None]
    """preflight(rl_config): raise one ConfigError line before Ray starts if the engines cannot work."""
    start: Callable[[Any, list], list]
    """start(rl_config, rollout_slots) -> engine actor handles."""
    weights_sink: Callable[[Any], WeightSink]
    """weights_sink(rl_config) -> the trainer-side packer for this kind."""
    on_dead: Literal["restart", "drop"] = "drop"
    """What the health check does with an engine that stopped answering: start a new one on its slot and
    re-send the current weights, or drop it and go on with the rest (smart.rollout.health)."""


_KINDS = {"embedded": "smart.rollout.engines.embedded", "sglang": "smart.rollout.engines.sglang"}


def engine_kind(name: str) -> EngineKind:
    if name not in _KINDS:
        raise ConfigError(f"rollout.engine={name!r} is not an engine; choose one of {', '.join(_KINDS)}")
    return importlib.import_module(_KINDS[name]).KIND


def sync_weights(trainer, rollout) -> int:
    """Push the trainer's weights to every engine of the rollout manager, tagged with the trainer's
    version; returns that version once every engine reports it."""
    version = trainer.weights_version()
    sink, engines = ray.get(rollout.weight_targets.remote())
    weights = sink.pack(trainer, version)
    versions = ray.get([e.push.remote(weights, version) for e in engines])
    if set(versions) != {version}:
        raise RuntimeError(f"engines report weights versions {versions} after syncing version {version}")
    sink.release(version)
    ray.get(rollout.record_weights_version.remote(version, [weights]))  # in a list: a ref stays a ref
    return version
