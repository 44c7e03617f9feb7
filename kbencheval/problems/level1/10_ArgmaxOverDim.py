"""Argmax over the middle dimension of a (batch, dim1, dim2) tensor (int64 indices)."""

import torch
import torch.nn as nn

batch_size = 128
dim1 = 2048
dim2 = 3072
reduce_dim = 1

SMALL_SIZES = {"batch_size": 4, "dim1": 75, "dim2": 50}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
