"""Embedded training backend: a Hugging Face causal LM trained with plain torch (FSDP2 on several GPUs).

Names load on first use, so `smart.backends.torch.config` (the `train:` section) reads without torch.
"""

import importlib

_EXPORTS = {
    "GRPOConfig": "config", "TrainConfig": "config",
    "ModelPathError": "backend", "TorchTrainBackend": "backend",
    "MicroBatch": "batching", "build_micro_batch": "batching", "pack_micro_batches": "batching",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
