import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def argmax_middle_kernel(x_ptr, out_ptr, n_reduce, n_inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # x viewed as (outer, reduce, inner); loads run contiguously along `inner`. Each of the
    # BLOCK_R lanes keeps its own running best (strictly greater wins, so its first maximum);
    # one reduction at the end picks the largest value and, among equals, the smallest index,
    # which is torch's rule.
    outer = tl.program_id(0).to(tl.int64)
    inner = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    inner_mask = inner < n_inner
    base = x_ptr + outer * n_reduce * n_inner
    lanes = tl.arange(0, BLOCK_R)
    best = tl.full((BLOCK_R, BLOCK_I), -float("inf"), dtype=tl.float32)
    best_idx = tl.zeros((BLOCK_R, BLOCK_I), dtype=tl.int32) + lanes[:, None]
    for r0 in range(0, n_reduce, BLOCK_R):
        r = r0 + lanes
        mask = (r[:, None] < n_reduce) & inner_mask[None, :]
        tile = tl.load(base + r[:, None].to(tl.int64) * n_inner + inner[None, :], mask=mask, other=-float("inf"))
        better = tile > best
        best = tl.where(better, tile, best)
        best_idx = tl.where(better, r[:, None], best_idx)
    top = tl.max(best, axis=0)
    candidates = tl.where(best == top[None, :], best_idx, n_reduce)
    tl.store(out_ptr + outer * n_inner + inner, tl.min(candidates, axis=0).to(tl.int64), mask=inner_mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        n_outer = math.prod(x.shape[:dim])
        n_reduce = x.shape[dim]
        n_inner = math.prod(x.shape[dim + 1 :])
        out_shape = x.shape[:dim] + x.shape[dim + 1 :]
        out = torch.empty(out_shape, dtype=torch.int64, device=x.device)
        block_i = 128
        grid = (n_outer, triton.cdiv(n_inner, block_i))
        argmax_middle_kernel[grid](x, out, n_reduce, n_inner, BLOCK_R=32, BLOCK_I=block_i, num_warps=8)
        return out
