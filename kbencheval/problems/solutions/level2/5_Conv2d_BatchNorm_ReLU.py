import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bn_relu_kernel(x_ptr, y_ptr, mean_ptr, var_ptr, w_ptr, b_ptr, C, HW, eps, BLOCK: tl.constexpr):
    # Grid (N*C, HW blocks): the channel is fixed per program, so BN folds to one scale and shift.
    nc = tl.program_id(0)
    c = nc % C
    scale = tl.load(w_ptr + c) / tl.sqrt(tl.load(var_ptr + c) + eps)
    shift = tl.load(b_ptr + c) - tl.load(mean_ptr + c) * scale
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HW
    x = tl.load(x_ptr + nc * HW + offs, mask=mask)
    tl.store(y_ptr + nc * HW + offs, tl.maximum(x * scale + shift, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv(x).contiguous()  # the one op left to torch (ALLOWED_TORCH_OPS)
        N, C, H, W = c.shape
        y = torch.empty_like(c)
        block = 1024
        grid = (N * C, triton.cdiv(H * W, block))
        bn_relu_kernel[grid](c, y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                             C, H * W, self.bn.eps, BLOCK=block, num_warps=4)
        return y
