"""`EmbeddedEngineActor`: kbencheval's transformers `EmbeddedEngine` inside a Ray actor on the
placement group. Weights travel through the Ray object store: rank 0's state dict is put there once
and every engine copies it into its live model.
"""

from __future__ import annotations

import dataclasses

import ray

from kbencheval.llm.base import Completion, SamplingParams
from smart.rollout.engines import EngineKind


@ray.remote
class EmbeddedEngineActor:
    def __init__(self, model_path: str, device: str = "cpu", dtype: str = "auto", max_batch_size: int = 128):
        import torch

        torch.set_num_threads(1)  # engines share cores with the trainer and eval actors
        from kbencheval.llm.embedded import EmbeddedEngine

        self.engine = EmbeddedEngine(model_path, device=device, dtype=dtype, max_batch_size=max_batch_size)

    def generate_ids(self, prompt_ids_batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        return self.engine.generate_ids(prompt_ids_batch, params)

    def push(self, state_dict: dict, version: int) -> int:
        self.engine.update_weights(state_dict, version)
        return self.engine.weights_version

    def weights_version(self) -> int:
        return self.engine.weights_version

    def state_dict(self) -> dict:
        return {k: v.cpu() for k, v in self.engine.state_dict().items()}

    def health(self, timeout_s: float) -> None:
        pass  # answering at all is the proof: the model lives in this actor

    def retire(self) -> None:
        pass

    def close(self) -> None:
        pass  # holds nothing outside its actor


@dataclasses.dataclass(frozen=True)
class ObjectStoreWeights:
    """The trainer's full state dict, left in the object store; each engine fetches it in `push`."""

    def pack(self, trainer, version: int):
        return trainer.weights_ref()

    def release(self, version: int) -> None:
        pass  # the object ref is freed when the last engine drops it


def engine_dtype(cfg) -> str:
    """rollout.engine_dtype, with auto following an fp32 trainer (a bf16 engine would not see small updates)."""
    if cfg.rollout.engine_dtype != "auto":
        return cfg.rollout.engine_dtype
    return "float32" if getattr(cfg.train, "dtype", "auto") == "fp32" else "auto"


def _start(cfg, slots: list) -> list:
    device = "cuda" if cfg.cluster.gpus_per_bundle else "cpu"
    dtype = engine_dtype(cfg)
    return [EmbeddedEngineActor.options(**slot.options()).remote(cfg.model_path, device, dtype, cfg.rollout.engine_max_batch)
            for slot in slots]


KIND = EngineKind(needs_slots=True, preflight=lambda cfg: None, start=_start,
                  weights_sink=lambda cfg: ObjectStoreWeights(), on_dead="restart")
