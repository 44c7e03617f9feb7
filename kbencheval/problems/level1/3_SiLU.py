"""SiLU / Swish: y = x * sigmoid(x), elementwise."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 24576

SMALL_SIZES = {"batch_size": 3, "dim": 1111}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
