"""BatchNorm2d with batch statistics (training-mode normalisation, no running-stat update)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 64
height = 256
width = 256

SMALL_SIZES = {"batch_size": 3, "channels": 5, "height": 13, "width": 11}


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.2 * torch.randn(channels))
        self.bias = nn.Parameter(0.2 * torch.randn(channels))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # training=True normalises with this batch's per-channel mean and biased variance,
        # whatever mode the module is in; no running statistics are kept.
        return F.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.eps)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width) * 1.5 + 0.3]


def get_init_inputs():
    return [channels]
