"""Log-softmax over dimension 1 of a (batch, dim) tensor."""

import torch
import torch.nn as nn

batch_size = 16384
dim = 24576

SMALL_SIZES = {"batch_size": 6, "dim": 1500}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
