import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_middle_kernel(x_ptr, out_ptr, n_reduce, n_inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # x is viewed as (outer, reduce, inner); each program owns BLOCK_I inner columns of one outer
    # index and walks down the reduced axis, so every load is a contiguous run along `inner`.
    outer = tl.program_id(0).to(tl.int64)
    inner = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    inner_mask = inner < n_inner
    base = x_ptr + outer * n_reduce * n_inner
    acc = tl.zeros((BLOCK_R, BLOCK_I), dtype=tl.float32)
    for r0 in range(0, n_reduce, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < n_reduce) & inner_mask[None, :]
        acc += tl.load(base + r[:, None].to(tl.int64) * n_inner + inner[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + outer * n_inner + inner, tl.sum(acc, axis=0), mask=inner_mask)


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
        out_shape = list(x.shape)
        out_shape[dim] = 1
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        block_i = 128
        grid = (n_outer, triton.cdiv(n_inner, block_i))
        sum_middle_kernel[grid](x, out, n_reduce, n_inner, BLOCK_R=32, BLOCK_I=block_i, num_warps=8)
        return out
