"""Residual add followed by LayerNorm (random affine): y = LayerNorm(x + residual)."""

import torch
import torch.nn as nn

batch_size = 16384
hidden = 8192

SMALL_SIZES = {"batch_size": 7, "hidden": 300}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(batch_size, hidden), torch.randn(batch_size, hidden) * 0.5 + 1.0]


def get_init_inputs():
    return [hidden]
