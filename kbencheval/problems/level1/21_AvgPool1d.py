"""1D average pooling (window 8, stride 4, padding 2; padded zeros count) over (batch, channels, length)."""

import torch
import torch.nn as nn

batch_size = 80
channels = 128
length = 65536
kernel_size = 8
stride = 4
padding = 2

SMALL_SIZES = {"batch_size": 2, "channels": 3, "length": 301}


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [kernel_size, stride, padding]
