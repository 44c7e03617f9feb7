"""Embedded training backend: a Hugging Face causal LM trained with plain torch (FSDP2 on several GPUs)."""

from smart.backends.torch.backend import ModelPathError, TorchTrainBackend
from smart.backends.torch.batching import MicroBatch, build_micro_batch, pack_micro_batches
from smart.backends.torch.config import GRPOConfig, TrainConfig

__all__ = [
    "GRPOConfig",
    "MicroBatch",
    "ModelPathError",
    "TorchTrainBackend",
    "TrainConfig",
    "build_micro_batch",
    "pack_micro_batches",
]
