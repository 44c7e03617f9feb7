import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_stats_kernel(x_ptr, mean_ptr, m2_ptr, hw, BLOCK: tl.constexpr):
    # Program (n, c) reduces the contiguous plane x[n, c, :, :] to its mean and sum of squared
    # deviations (two passes over an L2-resident plane), stored at partial index c * N + n.
    n = tl.program_id(0)
    c = tl.program_id(1)
    n_batch = tl.num_programs(0)
    base = x_ptr + (n.to(tl.int64) * tl.num_programs(1) + c) * hw
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, hw, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(base + offs, mask=offs < hw, other=0.0)
    mean = tl.sum(acc, axis=0) / hw
    acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, hw, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        mask = offs < hw
        d = tl.where(mask, tl.load(base + offs, mask=mask, other=0.0) - mean, 0.0)
        acc2 += d * d
    tl.store(mean_ptr + c * n_batch + n, mean)
    tl.store(m2_ptr + c * n_batch + n, tl.sum(acc2, axis=0))


@triton.jit
def finalize_kernel(mean_ptr, m2_ptr, w_ptr, b_ptr, scale_ptr, shift_ptr, n_batch, hw, eps, BLOCK: tl.constexpr):
    # Combine the N equal-sized partials of channel c (Chan et al.'s parallel variance formula).
    c = tl.program_id(0)
    idx = tl.arange(0, BLOCK)
    mask = idx < n_batch
    means = tl.load(mean_ptr + c * n_batch + idx, mask=mask, other=0.0)
    m2s = tl.load(m2_ptr + c * n_batch + idx, mask=mask, other=0.0)
    mean = tl.sum(means, axis=0) / n_batch
    dev = tl.where(mask, means - mean, 0.0)
    var = (tl.sum(m2s, axis=0) + hw * tl.sum(dev * dev, axis=0)) / (n_batch * hw)
    scale = tl.load(w_ptr + c) / tl.sqrt(var + eps)
    tl.store(scale_ptr + c, scale)
    tl.store(shift_ptr + c, tl.load(b_ptr + c) - mean * scale)


@triton.jit
def apply_kernel(x_ptr, y_ptr, scale_ptr, shift_ptr, n_channels, hw, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    c = plane % n_channels
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < hw
    base = plane.to(tl.int64) * hw
    x = tl.load(x_ptr + base + offs, mask=mask)
    tl.store(y_ptr + base + offs, x * tl.load(scale_ptr + c) + tl.load(shift_ptr + c), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(channels))
        self.bias = nn.Parameter(0.2 * torch.randn(channels))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        hw = h * w
        f32 = dict(dtype=torch.float32, device=x.device)
        means = torch.empty(c * n, **f32)
        m2s = torch.empty(c * n, **f32)
        scale = torch.empty(c, **f32)
        shift = torch.empty(c, **f32)
        partial_stats_kernel[(n, c)](x, means, m2s, hw, BLOCK=2048, num_warps=8)
        finalize_kernel[(c,)](
            means, m2s, self.weight, self.bias, scale, shift, n, hw, self.eps, BLOCK=triton.next_power_of_2(n)
        )
        y = torch.empty_like(x)
        block = 4096
        apply_kernel[(n * c, triton.cdiv(hw, block))](x, y, scale, shift, c, hw, BLOCK=block, num_warps=8)
        return y
