"""Logprobs and entropy of chosen positions, in token chunks, straight from hidden states.

    pytest tests/smart/test_grpo_algo.py

Why: with Qwen3's 151,936-token vocabulary one micro-batch of 32k tokens has bf16 logits of 10 GB
and an fp32 copy of 20 GB. Here only the positions that are trained (or asked for) are projected,
`chunk_tokens` rows at a time; each chunk's fp32 log-softmax is recomputed in the backward pass
(activation checkpointing), so peak memory holds one chunk's logits, not all of them.
`temperature` divides the logits first: the trainer then scores tokens under the same softmax(z/T)
the rollout engine sampled from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from smart.algo.losses import at_least_fp32


def _chunk_stats(hidden_NH: torch.Tensor, weight_VH: torch.Tensor, ids_N: torch.Tensor, temperature: float,
                 with_entropy: bool, entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # fp32 (or wider) from here on: a bf16 log-softmax loses the small ratios PPO relies on.
    z_NV = at_least_fp32(F.linear(hidden_NH, weight_VH))
    if temperature != 1.0:
        z_NV = z_NV / temperature
    lse_N = torch.logsumexp(z_NV, dim=-1)
    logp_N = z_NV.gather(-1, ids_N[:, None])[:, 0] - lse_N
    if not with_entropy:
        return logp_N, torch.zeros_like(logp_N)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):  # a metric needs no graph
        entropy_N = lse_N - (torch.softmax(z_NV, dim=-1) * z_NV).sum(-1)
    return logp_N, entropy_N


def chunked_logprobs(
    hidden_NH: torch.Tensor,
    weight_VH: torch.Tensor,
    ids_N: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_tokens: int = 2048,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(h W^T / T)[id] (and the entropy of that softmax) for N positions, in fp32 (float64 stays).

    entropy_grad=False returns the entropy detached (a logged metric, not a loss term).

    Equal to projecting all N rows at once (tests/smart/test_grpo_algo.py), including gradients.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to score sampled tokens, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    logps, entropies = [], []
    recompute = torch.is_grad_enabled() and (hidden_NH.requires_grad or weight_VH.requires_grad)
    for start in range(0, hidden_NH.shape[0], chunk_tokens):
        args = (hidden_NH[start : start + chunk_tokens], weight_VH, ids_N[start : start + chunk_tokens],
                temperature, with_entropy, entropy_grad)
        if recompute:
            logp, ent = checkpoint(_chunk_stats, *args, use_reentrant=False)
        else:
            logp, ent = _chunk_stats(*args)
        logps.append(logp)
        entropies.append(ent)
    if not logps:  # no position asked for
        empty = at_least_fp32(hidden_NH.new_zeros(0))
        return empty, (empty if with_entropy else None)
    return torch.cat(logps), (torch.cat(entropies) if with_entropy else None)


def place(values_N: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Scatter N per-position values back into a [B, T] tensor (0 where mask is 0), row-major order."""
    out_BT = torch.zeros(mask_BT.shape, dtype=values_N.dtype, device=values_N.device)
    return out_BT.masked_scatter(mask_BT.bool(), values_N)
