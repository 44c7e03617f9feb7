import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def squared_error_partial_kernel(a_ptr, b_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    # Each program sums ITERS * BLOCK squared differences into one partial (no atomics, so the
    # result is deterministic run to run).
    start = tl.program_id(0).to(tl.int64) * BLOCK * ITERS
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(ITERS):
        offs = start + i * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements
        d = tl.load(a_ptr + offs, mask=mask, other=0.0) - tl.load(b_ptr + offs, mask=mask, other=0.0)
        acc += d * d
    tl.store(partial_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@triton.jit
def scaled_sum_kernel(partial_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, n, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) * scale)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        a, b = predictions.contiguous(), targets.contiguous()
        n = a.numel()
        block, iters = 4096, 8
        n_partials = triton.cdiv(n, block * iters)
        partials = torch.empty(n_partials, dtype=torch.float32, device=a.device)
        out = torch.empty((), dtype=a.dtype, device=a.device)
        squared_error_partial_kernel[(n_partials,)](a, b, partials, n, BLOCK=block, ITERS=iters, num_warps=8)
        scaled_sum_kernel[(1,)](partials, out, n_partials, 1.0 / n, BLOCK=1024)
        return out
