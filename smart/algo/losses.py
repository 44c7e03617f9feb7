"""Losses for SFT and GRPO, plain torch (no Ray, no model): unit-tested against hand-computed values.

    pytest tests/smart/test_algo.py

Shapes carry suffixes: B sequences, T positions, V vocabulary. `logits_BTV[:, t]` is the prediction
for `ids_BT[:, t]`: callers shift (logits of position t-1 predict token t) before calling in.
Every loss takes an optional `denom`: the aggregated sum is divided by it instead of the local
count, so micro-batch losses computed with the global count add up exactly to the full-batch loss
(gradient accumulation gives the same gradient however the batch was split).
"""

from __future__ import annotations

from typing import Literal

import torch

KLType = Literal["k1", "k3"]
LossAgg = Literal["token_mean", "seq_mean"]


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """x in fp32, or in its own dtype when that is wider: a float64 caller (a gradient check) keeps float64."""
    return x if x.dtype == torch.float64 else x.float()


def token_logprobs(logits_BTV: torch.Tensor, ids_BT: torch.Tensor) -> torch.Tensor:
    """log p(ids | logits) per position, in fp32 (bf16 log-softmax loses the ratios PPO relies on)."""
    logits_BTV = at_least_fp32(logits_BTV)
    picked_BT = torch.gather(logits_BTV, -1, ids_BT.unsqueeze(-1)).squeeze(-1)
    return picked_BT - torch.logsumexp(logits_BTV, dim=-1)


def entropy_from_logits(logits_BTV: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax at each position: logsumexp(z) - sum(p * z)."""
    logits_BTV = at_least_fp32(logits_BTV)
    p_BTV = torch.softmax(logits_BTV, dim=-1)
    return torch.logsumexp(logits_BTV, dim=-1) - (p_BTV * logits_BTV).sum(-1)


def aggregate(values_BT: torch.Tensor, mask_BT: torch.Tensor, loss_agg: LossAgg, denom: float | None = None):
    """Masked mean of per-token values.

    token_mean: sum over all masked tokens / number of masked tokens (long answers weigh more).
    seq_mean: mean over sequences of each sequence's masked mean (every answer weighs the same).
    A sequence with no masked token contributes 0 to seq_mean but still counts in its default denominator.
    """
    mask_BT = mask_BT.to(values_BT.dtype)
    if loss_agg == "token_mean":
        total = (values_BT * mask_BT).sum()
        n = mask_BT.sum() if denom is None else denom
    elif loss_agg == "seq_mean":
        per_seq_B = (values_BT * mask_BT).sum(-1) / mask_BT.sum(-1).clamp(min=1)
        total = per_seq_B.sum()
        n = values_BT.shape[0] if denom is None else denom
    else:
        raise ValueError(f"loss_agg must be 'token_mean' or 'seq_mean', got {loss_agg!r}")
    if isinstance(n, torch.Tensor):
        n = n.clamp(min=1)
    else:
        n = max(float(n), 1.0)
    return total / n


def sft_loss(
    logits_BTV: torch.Tensor, target_ids_BT: torch.Tensor, loss_mask_BT: torch.Tensor, *, denom: float | None = None
) -> torch.Tensor:
    """Cross-entropy averaged over the masked (assistant) tokens only; prompt and padding add nothing."""
    nll_BT = -token_logprobs(logits_BTV, target_ids_BT)
    return aggregate(nll_BT, loss_mask_BT, "token_mean", denom)


def grpo_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    loss_mask_BT: torch.Tensor,
    *,
    eps_clip: float = 0.2,
    eps_clip_high: float = 0.28,
    ref_logprobs_BT: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_type: KLType = "k3",
    entropy_BT: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    loss_agg: LossAgg = "token_mean",
    denom: float | None = None,
    rollout_logprobs_BT: torch.Tensor | None = None,
    tis_clip: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clipped policy-gradient loss with clip-higher, optional KL to a reference and entropy bonus.

    The ratio is clipped to [1 - eps_clip, 1 + eps_clip_high]; a wider upper bound lets rare tokens
    with positive advantage grow faster (clip-higher, DAPO: arXiv 2503.14476). Per token:
        loss = max(-A * r, -A * clip(r)) + kl_coef * KL - entropy_coef * H
    with KL k1 = logp - logp_ref or k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman's unbiased,
    always >= 0 estimator). Metrics use the same aggregation and `denom` as the loss, so micro-batch
    metrics computed with a shared denom add up to the full-batch value.

    Truncated importance sampling (tis_clip > 0, as SLIME does): the rollout engine sampled from its
    own numerics, not the trainer's, so the policy-gradient term of each token is weighted by
    w = min(exp(old - rollout), tis_clip), detached (Yao et al., "Your efficient RL framework secretly
    brings you off-policy RL training", 2025). KL and entropy terms are not weighted.
    """
    if kl_type not in ("k1", "k3"):
        raise ValueError(f"kl_type must be 'k1' or 'k3', got {kl_type!r}")
    if kl_coef > 0 and ref_logprobs_BT is None:
        raise ValueError("kl_coef > 0 needs reference logprobs: enable use_ref_model or set kl_coef=0")
    if tis_clip > 0 and rollout_logprobs_BT is None:
        raise ValueError("tis_clip > 0 needs the rollout engine's logprobs (rollout_logprobs_BT), or set tis_clip=0")
    if entropy_coef > 0 and entropy_BT is None:
        raise ValueError("entropy_coef > 0 needs entropy_BT: pass entropy_from_logits(...) or set entropy_coef=0")
    mask_BT = loss_mask_BT.to(logprobs_BT.dtype)
    adv_B1 = advantages_B.to(logprobs_BT.dtype).unsqueeze(-1)

    # Masked positions (prompt, padding, environment tokens) may hold anything in old/ref logprobs;
    # zeroing their log-ratios keeps an inf there from turning into NaN gradients.
    on_BT = mask_BT > 0
    ratio_BT = torch.exp(torch.where(on_BT, logprobs_BT - old_logprobs_BT, 0.0))
    unclipped_BT = -adv_B1 * ratio_BT
    clipped_BT = -adv_B1 * torch.clamp(ratio_BT, 1.0 - eps_clip, 1.0 + eps_clip_high)
    pg_BT = torch.maximum(unclipped_BT, clipped_BT)

    def agg(x_BT: torch.Tensor) -> torch.Tensor:
        return aggregate(x_BT, mask_BT, loss_agg, denom)

    metrics: dict[str, float] = {}
    if tis_clip > 0:
        with torch.no_grad():
            raw_BT = torch.exp(torch.where(on_BT, old_logprobs_BT - rollout_logprobs_BT, 0.0))
            tis_BT = raw_BT.clamp(max=tis_clip)
        pg_BT = pg_BT * tis_BT
        metrics["tis_mean"] = agg(tis_BT).item()
        metrics["tis_clip_frac"] = agg((raw_BT > tis_clip).to(mask_BT.dtype)).item()
    loss_BT = pg_BT
    if ref_logprobs_BT is not None:
        log_ratio_BT = torch.where(on_BT, ref_logprobs_BT - logprobs_BT, 0.0)
        kl_BT = -log_ratio_BT if kl_type == "k1" else torch.exp(log_ratio_BT) - log_ratio_BT - 1.0
        if kl_coef > 0:
            loss_BT = loss_BT + kl_coef * kl_BT
        metrics["kl"] = agg(kl_BT.detach()).item()
    if entropy_BT is not None:
        if entropy_coef > 0:
            loss_BT = loss_BT - entropy_coef * entropy_BT
        metrics["entropy"] = agg(entropy_BT.detach()).item()

    loss = agg(loss_BT)
    with torch.no_grad():
        metrics["pg_loss"] = agg(pg_BT).item()
        metrics["clip_frac"] = agg((clipped_BT > unclipped_BT).to(mask_BT.dtype)).item()
        metrics["ratio_mean"] = agg(ratio_BT).item()
    return loss, metrics
