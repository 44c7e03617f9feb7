"""RMSNorm over the last dimension in bfloat16: y = x / sqrt(mean(x^2) + eps) * weight."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 24576

SMALL_SIZES = {"batch_size": 12, "dim": 1000}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6, dtype=torch.bfloat16)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [dim]
