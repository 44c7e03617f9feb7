"""Scaled add (axpy): out = x + alpha * y over two same-shaped tensors."""

import torch
import torch.nn as nn

batch_size = 16384
dim = 16384
alpha = 0.75

SMALL_SIZES = {"batch_size": 6, "dim": 513}


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.add(x, y, alpha=self.alpha)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [alpha]
