"""Token logprobs and entropy from vocab-sharded logits: reductions over the TP group, no full-logit gather.

Each TP rank holds logits for its slice of the (padded) vocabulary. Rows past the real vocabulary
are zero in the padded embedding, so their logit is 0, not -inf: they are masked to a large negative
finite value (finite so that p * z stays 0 * big = 0 in the entropy rather than NaN).
"""

from __future__ import annotations

import torch
from megatron.core import parallel_state
from megatron.core.tensor_parallel import vocab_parallel_cross_entropy
from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

_MASKED = -1e30


def mask_padded_vocab(logits_BTv: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """fp32 copy of this rank's logits with the padded vocabulary entries pushed to -1e30."""
    shard = logits_BTv.shape[-1]
    start = parallel_state.get_tensor_model_parallel_rank() * shard
    real = max(0, min(shard, vocab_size - start))
    out = logits_BTv.float().clone() if logits_BTv.dtype == torch.float32 else logits_BTv.float()
    if real < shard:
        out = out.masked_fill(torch.arange(shard, device=out.device) >= real, _MASKED)
    return out


def vocab_parallel_logprobs(logits_BTv: torch.Tensor, ids_BT: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """log p(ids) in fp32; Megatron's vocab-parallel cross entropy (it all-reduces max and sum-exp)."""
    # vocab_parallel_cross_entropy works in place on its input: mask_padded_vocab hands it a fresh copy.
    return -vocab_parallel_cross_entropy(mask_padded_vocab(logits_BTv, vocab_size), ids_BT)


def vocab_parallel_entropy(logits_BTv: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Softmax entropy logsumexp(z) - sum(p z), summed over the TP group; differentiable."""
    z = mask_padded_vocab(logits_BTv, vocab_size)
    m = z.max(dim=-1, keepdim=True).values.detach()  # any shift gives the same value; no gradient needed
    torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX,
                                 group=parallel_state.get_tensor_model_parallel_group())
    e = torch.exp(z - m)
    sum_e = reduce_from_tensor_model_parallel_region(e.sum(-1))
    sum_ez = reduce_from_tensor_model_parallel_region((e * z).sum(-1))
    return m.squeeze(-1) + torch.log(sum_e) - sum_ez / sum_e
