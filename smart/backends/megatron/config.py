"""The `train:` section when `backend: megatron`: the torch backend's knobs plus the parallel layout.

Plain dataclass, no megatron import: reading a config never loads megatron-core.
"""

from __future__ import annotations

import dataclasses

from kbencheval.config import ConfigError
from smart.backends.torch.config import TrainConfig


@dataclasses.dataclass(kw_only=True)
class MegatronTrainConfig(TrainConfig):
    """TrainConfig (lr, grpo, micro_batch_tokens, ...) + how Megatron splits the model; data parallel
    takes the GPUs left over (cluster.actor_ranks / (tp * pp * cp)). dtype auto means bf16 here,
    and gradient_checkpointing turns on Megatron's full recomputation."""

    tp: int = 1
    """tensor parallel size (attention heads, MLP and vocabulary split over tp GPUs)"""
    pp: int = 1
    """pipeline parallel size (layers split into pp stages)"""
    cp: int = 1
    """context parallel size: each rank holds 2 of 2*cp sequence chunks; K/V all-gathered (attention.py)"""
    distributed_optimizer: bool = True
    """shard fp32 master weights and Adam state over data parallel ranks (ZeRO-1)"""
    make_vocab_size_divisible_by: int = 128
    """pad the vocabulary (zero rows, masked out of every softmax) to a multiple of this * tp"""

    def validate(self, world_size: int | None = None) -> None:
        super().validate()
        if min(self.tp, self.pp, self.cp) < 1:
            raise ConfigError(f"train.tp/pp/cp must be >= 1, got {self.tp}/{self.pp}/{self.cp}")
        if self.make_vocab_size_divisible_by < 1:
            raise ConfigError("train.make_vocab_size_divisible_by must be >= 1")
        if world_size is not None and world_size % (self.tp * self.pp * self.cp):
            raise ConfigError(
                f"{world_size} training GPUs do not split into tp*pp*cp = {self.tp}*{self.pp}*{self.cp}; "
                "set cluster.actor_ranks to a multiple of tp*pp*cp"
            )
