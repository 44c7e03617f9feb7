"""Mean over the last dimension of a (batch, dim) tensor."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 24576

SMALL_SIZES = {"batch_size": 11, "dim": 333}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=-1)


def get_inputs():
    # A per-row offset keeps the means well away from zero, so the relative tolerance is what matters.
    return [torch.randn(batch_size, dim) + torch.randn(batch_size, 1)]


def get_init_inputs():
    return []
