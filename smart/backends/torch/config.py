"""Typed configs of the torch training backend (YAML section `train:` or key=value overrides)."""

from __future__ import annotations

import dataclasses
import math
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
    num_steps_per_rollout: int = 1
    """optimizer steps (mini-batches) per rollout batch. Old logprobs are computed once, before the
    first; from the second on the policy has moved, so the PPO ratio differs from 1 and clipping acts"""
    use_rollout_logprobs: bool = False
    """true: the engine's logprobs are the old logprobs (no trainer recompute; the ratio then also
    absorbs the engine/trainer numerics gap). false: the trainer recomputes them once per rollout"""
    tis_clip: float = 0.0
    """truncated importance sampling (SLIME): weight each token's policy-gradient term by
    min(exp(old - rollout logprob), tis_clip); 0 = off, 2 is SLIME's usual value"""
    temperature: float = 1.0
    """logits are divided by it before the log-softmax; `smart rl` sets it to rollout.temperature"""
    log_entropy: bool = True
    """compute the entropy metric (in chunks, no gradient); entropy_coef > 0 computes it regardless"""

    def validate(self) -> None:
        if not 0 <= self.eps_clip < 1 or self.eps_clip_high < 0:
            raise ConfigError(f"grpo.eps_clip must be in [0, 1) and eps_clip_high >= 0, got {self.eps_clip}, {self.eps_clip_high}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ConfigError("grpo.kl_coef and grpo.entropy_coef must be >= 0")
        if self.num_steps_per_rollout < 1:
            raise ConfigError(f"grpo.num_steps_per_rollout must be >= 1, got {self.num_steps_per_rollout}")
        if self.tis_clip < 0:
            raise ConfigError(f"grpo.tis_clip must be >= 0 (0 = off), got {self.tis_clip}")
        if self.tis_clip > 0 and self.use_rollout_logprobs:
            raise ConfigError("grpo.tis_clip corrects trainer old logprobs towards the engine's; with "
                              "use_rollout_logprobs=true there is nothing to correct: set one of them off")
        if not self.temperature > 0:
            raise ConfigError(f"grpo.temperature must be > 0 (sampled tokens are scored at it), got {self.temperature}")


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
    """linear warm-up of the learning rate over this many optimizer steps, then lr_schedule"""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """after warm-up: constant, or a linear or cosine decay to min_lr_ratio * lr at lr_decay_steps"""
    lr_decay_steps: int = 0
    """the optimizer step (warm-up included) where a decaying schedule reaches its floor, and stays"""
    min_lr_ratio: float = 0.0
    """the decayed floor as a fraction of lr"""
    grad_clip: float = 1.0
    """max global grad norm; 0 disables clipping (the norm is still reported)"""
    micro_batch_tokens: int = 8192
    """token budget of one micro-batch, padding included (rows x longest row)"""
    logit_chunk_tokens: int = 2048
    """positions projected to the vocabulary at once; one chunk's fp32 logits are the peak (2048 x
    151,936 x 4 B = 1.2 GB for Qwen3), recomputed in the backward pass"""
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    """compute dtype; auto = bf16 on GPU, fp32 on CPU. Master weights and Adam state stay fp32."""
    device: str = "auto"
    """auto = cuda:<local rank> when a GPU is visible, else cpu"""
    seed: int = 0
    use_ref_model: bool = False
    """keep a frozen copy of the initial model for KL and reference logprobs"""
    gradient_checkpointing: bool = False
    attn_implementation: str = "sdpa"
    compile_layers: bool = False
    """torch.compile each decoder layer (regional compilation: one graph reused by every layer, fused norms,
    activations and rotary); the first steps of each new sequence shape pay the compile"""
    fused_optimizer: bool = True
    """on one CUDA GPU, AdamW's fused kernel (a few launches for all parameters) instead of its foreach path;
    the same update. CPU and FSDP runs keep foreach (fused over FSDP2's sharded tensors is unverified here)"""
    save_optimizer: bool = True
    """false: checkpoints hold weights, step and RNG only (Adam state is 2x the fp32 weights); a resumed
    run then starts with fresh Adam moments"""
    optimizer_from: str = ""
    """a trainer checkpoint folder (e.g. the SFT run's checkpoints/step_N that model_path was exported from)
    whose Adam moments this run starts with; lr, betas, weight decay, step and schedule stay this run's. A fresh
    Adam's first steps move every weight by about lr however small its gradient (benchmarks/grpo_calibration.py)"""
    grpo: GRPOConfig = dataclasses.field(default_factory=GRPOConfig)

    def validate(self) -> None:
        if self.micro_batch_tokens < 1 or self.logit_chunk_tokens < 1:
            raise ConfigError(f"micro_batch_tokens and logit_chunk_tokens must be >= 1, got "
                              f"{self.micro_batch_tokens}, {self.logit_chunk_tokens}")
        if self.lr < 0 or self.weight_decay < 0 or self.grad_clip < 0 or self.warmup_steps < 0:
            raise ConfigError("lr, weight_decay, grad_clip and warmup_steps must be >= 0")
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ConfigError(f"train.lr_schedule must be constant, linear or cosine, got {self.lr_schedule!r}")
        if self.lr_schedule != "constant" and self.lr_decay_steps <= self.warmup_steps:
            raise ConfigError(f"train.lr_schedule={self.lr_schedule} decays until train.lr_decay_steps, which must be "
                              f"> train.warmup_steps ({self.warmup_steps}); got {self.lr_decay_steps} (set it to num_steps)")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.optimizer_from and not Path(self.optimizer_from).expanduser().is_dir():
            raise ConfigError(f"train.optimizer_from={self.optimizer_from} is not a folder; pass a trainer checkpoint "
                              "(a run's checkpoints/step_N) or leave it empty for a fresh Adam")
        if self.grpo.kl_coef > 0 and not self.use_ref_model:
            raise ConfigError("grpo.kl_coef > 0 needs a reference model: set use_ref_model=true or grpo.kl_coef=0")
        self.grpo.validate()

    def lr_factor(self, step: int) -> float:
        """The learning rate of optimizer step `step` (0-based) as a fraction of lr."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.lr_schedule == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup_steps) / (self.lr_decay_steps - self.warmup_steps))
        shape = 1.0 - progress if self.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * shape
