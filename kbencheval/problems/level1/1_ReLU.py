"""ReLU: y = max(x, 0), elementwise over a large activation tensor."""

import torch
import torch.nn as nn

batch_size = 16384
dim = 16384

SMALL_SIZES = {"batch_size": 4, "dim": 300}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
