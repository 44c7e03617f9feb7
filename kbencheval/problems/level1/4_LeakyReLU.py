"""LeakyReLU with a configurable negative slope: y = x if x > 0 else slope * x."""

import torch
import torch.nn as nn

batch_size = 16384
dim = 24576
negative_slope = 0.2

SMALL_SIZES = {"batch_size": 7, "dim": 555}


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.act = nn.LeakyReLU(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]
