"""Core attention for Megatron's local layer spec: torch SDPA, with context parallelism by K/V all-gather.

Megatron's local `DotProductAttention` materialises the [b, heads, s, s] score matrix and, without
apex, runs an unfused softmax; SDPA does neither. Causal masking only: rows are right padded, so
padding never precedes a real token and needs no mask (the same reason the torch backend's logprobs
at real positions ignore the padding).

Context parallel (cp > 1) without Transformer Engine: each CP rank holds sequence chunks r and
2cp-1-r of 2cp equal chunks (Megatron's load-balanced layout, which its RoPE already slices for).
Keys and values are all-gathered over the CP group (backward: reduce-scatter of their gradients)
and each local query attends causally by global position. This is Llama 3's all-gather CP rather
than TE's ring attention: simpler, O(S) K/V memory per rank, no overlap of communication.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.transformer.module import MegatronModule
from megatron.core.utils import divide


def cp_chunk_positions(seq_len: int, cp_rank: int, cp_size: int, device=None) -> torch.Tensor:
    """Global positions held by CP rank `cp_rank`: chunks r and 2cp-1-r of 2cp (seq_len divisible by 2cp)."""
    chunk = seq_len // (2 * cp_size)
    first = torch.arange(cp_rank * chunk, (cp_rank + 1) * chunk, device=device)
    last = torch.arange((2 * cp_size - 1 - cp_rank) * chunk, (2 * cp_size - cp_rank) * chunk, device=device)
    return torch.cat([first, last])


def gather_cp(x: torch.Tensor, seq_dim: int) -> torch.Tensor:
    """All CP ranks' pieces of `x` along seq_dim, put back in global sequence order (differentiable)."""
    import torch.distributed.nn.functional as dist_nn

    group = parallel_state.get_context_parallel_group()
    size = parallel_state.get_context_parallel_world_size()
    pieces = dist_nn.all_gather(x.contiguous(), group=group)
    halves = [p.chunk(2, dim=seq_dim) for p in pieces]  # rank r: (chunk r, chunk 2cp-1-r)
    ordered = [halves[i][0] for i in range(size)] + [halves[size - 1 - i][1] for i in range(size)]
    return torch.cat(ordered, dim=seq_dim)


class SDPACoreAttention(MegatronModule):
    """Drop-in for DotProductAttention: q [sq, b, np, hn], k/v [sk, b, ng, hn] -> [sq, b, np * hn]."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type, attention_dropout=None,
                 softmax_scale=None, cp_comm_type=None, pg_collection=None, **_):
        super().__init__(config=config)
        tp = parallel_state.get_tensor_model_parallel_world_size()
        self.heads = divide(config.num_attention_heads, tp)
        self.groups = divide(config.num_query_groups or config.num_attention_heads, tp)
        self.scale = softmax_scale
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self.cp = config.context_parallel_size

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None, **_):
        if packed_seq_params is not None or attention_bias is not None:
            raise NotImplementedError("SDPACoreAttention supports neither packed sequences nor attention bias")
        sq, b = query.shape[0], query.shape[1]
        mask = None
        if self.cp > 1:
            key, value = gather_cp(key, 0), gather_cp(value, 0)
            rank = parallel_state.get_context_parallel_rank()
            q_pos = cp_chunk_positions(sq * self.cp, rank, self.cp, query.device)
            mask = torch.arange(key.shape[0], device=query.device)[None, :] <= q_pos[:, None]  # [sq, sk]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, hn]
        if self.groups != self.heads:  # GQA: each KV group serves heads/groups query heads
            k = k.repeat_interleave(self.heads // self.groups, dim=1)
            v = v.repeat_interleave(self.heads // self.groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale,
                                             dropout_p=self.dropout if self.training else 0.0)
        return out.permute(2, 0, 1, 3).reshape(sq, b, -1)
