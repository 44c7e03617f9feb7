"""Conv2d, plus a learned per-channel bias, then tanh, then a constant scale."""

import torch
import torch.nn as nn

batch_size = 16
in_channels = 32
out_channels = 64
height = 256
width = 256
kernel_size = 3
scale = 2.5

SMALL_SIZES = {"batch_size": 2, "in_channels": 3, "out_channels": 5, "height": 12, "width": 14}
ALLOWED_TORCH_OPS = ["aten.convolution"]


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.5)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x) + self.bias) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
