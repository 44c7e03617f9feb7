"""Typed configs of the torch training backend (YAML section `train:` or key=value overrides)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from kbencheval.config import ConfigError


@dataclasses.dataclass(kw_only=True)
class GRPOConfig:
    """Knobs of `smart.algo.grpo_loss`; the advantages themselves come from the rollout side."""

    eps_clip: float = 0.2
    """lower clip: ratio >= 1 - eps_clip"""
    eps_clip_high: float = 0.28
    """upper clip: ratio <= 1 + eps_clip_high (clip-higher, DAPO arXiv 2503.14476)"""
    kl_coef: float = 0.0
    """weight of the KL to the frozen reference; > 0 needs use_ref_model=true"""
    kl_type: Literal["k1", "k3"] = "k3"
    entropy_coef: float = 0.0
    """entropy bonus, subtracted from the loss"""
    loss_agg: Literal["token_mean", "seq_mean"] = "token_mean"
    """token_mean: every trained token weighs the same; seq_mean: every sample weighs the same"""

    def validate(self) -> None:
        if not 0 <= self.eps_clip < 1 or self.eps_clip_high < 0:
            raise ConfigError(f"grpo.eps_clip must be in [0, 1) and eps_clip_high >= 0, got {self.eps_clip}, {self.eps_clip_high}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ConfigError("grpo.kl_coef and grpo.entropy_coef must be >= 0")


@dataclasses.dataclass(kw_only=True)
class TrainConfig:
    """The embedded trainer: one HF model, AdamW, one optimizer step per train_* call."""

    model_path: str = ""
    """local folder with config.json and weights, or a Hugging Face hub id"""
    lr: float = 1e-6
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    warmup_steps: int = 0
    """linear warm-up of the learning rate over this many optimizer steps, then constant"""
    grad_clip: float = 1.0
    """max global grad norm; 0 disables clipping (the norm is still reported)"""
    micro_batch_tokens: int = 8192
    """token budget of one micro-batch, padding included (rows x longest row)"""
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    """compute dtype; auto = bf16 on GPU, fp32 on CPU. Master weights and Adam state stay fp32."""
    device: str = "auto"
    """auto = cuda:<local rank> when a GPU is visible, else cpu"""
    seed: int = 0
    use_ref_model: bool = False
    """keep a frozen copy of the initial model for KL and reference logprobs"""
    gradient_checkpointing: bool = False
    attn_implementation: str = "sdpa"
    grpo: GRPOConfig = dataclasses.field(default_factory=GRPOConfig)

    def validate(self) -> None:
        if self.micro_batch_tokens < 1:
            raise ConfigError(f"micro_batch_tokens must be >= 1, got {self.micro_batch_tokens}")
        if self.lr < 0 or self.weight_decay < 0 or self.grad_clip < 0 or self.warmup_steps < 0:
            raise ConfigError("lr, weight_decay, grad_clip and warmup_steps must be >= 0")
        if self.grpo.kl_coef > 0 and not self.use_ref_model:
            raise ConfigError("grpo.kl_coef > 0 needs a reference model: set use_ref_model=true or grpo.kl_coef=0")


def missing_local_model(path: str) -> bool:
    """A path that can only be local (not `org/name` hub id) and does not exist."""
    looks_local = path.startswith(("/", ".", "~")) or path.count("/") != 1
    return bool(path) and looks_local and not Path(path).expanduser().exists()
