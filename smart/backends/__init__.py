"""Training backends, chosen by the run config's `backend:` key. Each lives in its own folder and
imports its heavy dependencies only there; this registry names them by dotted path, so reading a
config imports no backend.

    cfg_cls = backend_config_class("torch")      # the `train:` section's dataclass (pure Python)
    backend = backend_class("torch")(cfg_cls())  # imports torch only now

A backend takes `Sample`s and exposes: train_step(samples, advantages) (old logprobs computed inside),
compute_logprobs, train_sft, state_dict_for_sync, weights_version, save_checkpoint / load_checkpoint /
export_hf; see TorchTrainBackend. `megatron` (Megatron-core TP/PP, needs the `megatron` extra) has the same surface.
"""

from __future__ import annotations

import importlib

from kbencheval.config import ConfigError

# name -> (the `train:` section's config class, the backend class), as module:attribute paths
BACKENDS: dict[str, tuple[str, str]] = {
    "torch": ("smart.backends.torch.config:TrainConfig", "smart.backends.torch.backend:TorchTrainBackend"),
    "megatron": ("smart.backends.megatron.config:MegatronTrainConfig",
                 "smart.backends.megatron.backend:MegatronTrainBackend"),
}


def _load(path: str):
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _entry(name: str) -> tuple[str, str]:
    if name not in BACKENDS:
        raise ConfigError(f"backend={name!r} is not a training backend; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[name]


def backend_config_class(name: str) -> type:
    """The dataclass of the `train:` section for backend `name` (never imports the backend itself)."""
    return _load(_entry(name)[0])


def backend_class(name: str) -> type:
    return _load(_entry(name)[1])


def logprob_mismatch(samples, logprobs: list[list[float]]) -> float:
    """Mean |engine logprob - trainer logprob| over trained tokens: near 0 when no token was re-tokenized."""
    diffs = [abs(a - b) for s, lp in zip(samples, logprobs) if s.trainable
             for a, b, m in zip(s.rollout_logprobs, lp, s.loss_mask) if m]
    return sum(diffs) / max(len(diffs), 1)
