"""2D max pooling (3x3 window, stride 2, padding 1) over an NCHW tensor."""

import torch
import torch.nn as nn

batch_size = 40
channels = 64
height = 512
width = 512
kernel_size = 3
stride = 2
padding = 1

SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 13, "width": 11}


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
