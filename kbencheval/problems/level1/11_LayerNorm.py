"""LayerNorm over the last dimension, with a learned (non-trivial) scale and shift."""

import torch
import torch.nn as nn

batch_size = 16384
dim = 24576

SMALL_SIZES = {"batch_size": 10, "dim": 900}


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        # Perturb the default ones/zeros so a kernel that ignores the affine part fails.
        nn.init.normal_(self.ln.weight, mean=1.0, std=0.2)
        nn.init.normal_(self.ln.bias, mean=0.0, std=0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim) * 2.0 + 0.5]


def get_init_inputs():
    return [dim]
