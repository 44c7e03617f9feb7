import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_layernorm_kernel(x_ptr, r_ptr, g_ptr, b_ptr, y_ptr, N, eps, BLOCK_N: tl.constexpr):
    # One program per row: the sum x + r stays in registers, so each input is read exactly once.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    v = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0) + tl.load(r_ptr + row * N + cols, mask=mask, other=0.0)
    mean = tl.sum(v, axis=0) / N
    d = tl.where(mask, v - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    g = tl.load(g_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * N + cols, d * rstd * g + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        residual = residual.contiguous()
        M, N = x.shape
        y = torch.empty_like(x)
        block_n = triton.next_power_of_2(N)
        add_layernorm_kernel[(M,)](x, residual, self.norm.weight, self.norm.bias, y, N, self.norm.eps,
                                   BLOCK_N=block_n, num_warps=min(16, max(1, block_n // 512)))
        return y
