import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def channel_stats_kernel(x_ptr, mean_ptr, m2_ptr, HW, BLOCK: tl.constexpr):
    # Per (n, c) plane: mean and centred sum of squares (two passes; the second mostly hits L2).
    nc = tl.program_id(0)
    base = x_ptr + nc * HW
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(base + offs, mask=offs < HW, other=0.0)
    mean = tl.sum(acc, axis=0) / HW
    acc2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        d = tl.where(offs < HW, tl.load(base + offs, mask=offs < HW, other=0.0) - mean, 0.0)
        acc2 += d * d
    tl.store(mean_ptr + nc, mean)
    tl.store(m2_ptr + nc, tl.sum(acc2, axis=0))


@triton.jit
def groupnorm_silu_kernel(x_ptr, y_ptr, mean_ptr, m2_ptr, w_ptr, b_ptr, C, HW, CPG, eps,
                          BLOCK: tl.constexpr, BLOCK_G: tl.constexpr):
    nc = tl.program_id(0)
    c = nc % C
    # Combine the group's equal-sized channel statistics (Chan et al.): var = E[M2/HW] + Var[channel means].
    first = nc - (c % CPG)
    g = tl.arange(0, BLOCK_G)
    gmask = g < CPG
    means = tl.load(mean_ptr + first + g, mask=gmask, other=0.0)
    m2s = tl.load(m2_ptr + first + g, mask=gmask, other=0.0)
    mean = tl.sum(means, axis=0) / CPG
    dm = tl.where(gmask, means - mean, 0.0)
    var = (tl.sum(m2s, axis=0) / HW + tl.sum(dm * dm, axis=0)) / CPG
    scale = tl.load(w_ptr + c) / tl.sqrt(var + eps)
    shift = tl.load(b_ptr + c) - mean * scale
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    h = tl.load(x_ptr + nc * HW + offs, mask=mask) * scale + shift
    tl.store(y_ptr + nc * HW + offs, h * tl.sigmoid(h), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(num_groups, out_channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv(x).contiguous()  # the one op left to torch (ALLOWED_TORCH_OPS)
        N, C, H, W = c.shape
        HW = H * W
        cpg = C // self.norm.num_groups
        means = torch.empty((N * C,), device=c.device, dtype=torch.float32)
        m2s = torch.empty((N * C,), device=c.device, dtype=torch.float32)
        channel_stats_kernel[(N * C,)](c, means, m2s, HW, BLOCK=2048, num_warps=8)
        y = torch.empty_like(c)
        block = 1024
        groupnorm_silu_kernel[(N * C, triton.cdiv(HW, block))](
            c, y, means, m2s, self.norm.weight, self.norm.bias, C, HW, cpg, self.norm.eps,
            BLOCK=block, BLOCK_G=triton.next_power_of_2(cpg), num_warps=4)
        return y
