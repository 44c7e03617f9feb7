"""`EngineActor`: kbencheval's embedded transformers engine inside a Ray actor.

Scale-out engines (SGLang servers: `smart.rollout.engines.sglang`) implement the same four methods:
generate_ids, update_weights, weights_version, state_dict.
"""

from __future__ import annotations

import ray

from kbencheval.llm.base import Completion, SamplingParams


@ray.remote
class EngineActor:
    def __init__(self, model_path: str, device: str = "cpu", dtype: str = "auto"):
        import torch

        torch.set_num_threads(1)  # engines share cores with the trainer and eval workers
        from kbencheval.llm.embedded import EmbeddedEngine

        self.engine = EmbeddedEngine(model_path, device=device, dtype=dtype)

    def generate_ids(self, prompt_ids_batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        return self.engine.generate_ids(prompt_ids_batch, params)

    def update_weights(self, state_dict: dict, version: int) -> int:
        self.engine.update_weights(state_dict, version)
        return self.engine.weights_version

    def weights_version(self) -> int:
        return self.engine.weights_version

    def state_dict(self) -> dict:
        return {k: v.cpu() for k, v in self.engine.state_dict().items()}
