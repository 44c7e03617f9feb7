import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_tanh_scale_kernel(x_ptr, y_ptr, bias_ptr, C, HW, scale, BLOCK: tl.constexpr):
    nc = tl.program_id(0)
    b = tl.load(bias_ptr + nc % C)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    h = tl.load(x_ptr + nc * HW + offs, mask=mask) + b
    # tanh(h) = 1 - 2 / (exp(2h) + 1): saturates cleanly to +-1 when exp overflows or underflows.
    t = 1.0 - 2.0 / (tl.exp(2.0 * h) + 1.0)
    tl.store(y_ptr + nc * HW + offs, t * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.5)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv(x).contiguous()  # the one op left to torch (ALLOWED_TORCH_OPS)
        N, C, H, W = c.shape
        y = torch.empty_like(c)
        block = 1024
        grid = (N * C, triton.cdiv(H * W, block))
        bias_tanh_scale_kernel[grid](c, y, self.bias, C, H * W, self.scale, BLOCK=block, num_warps=4)
        return y
