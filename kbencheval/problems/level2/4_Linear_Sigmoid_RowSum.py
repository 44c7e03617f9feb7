"""Linear + sigmoid, then a sum over the output features: y[m] = sum_n sigmoid(x @ W^T + b)[m, n]."""

import torch
import torch.nn as nn

batch_size = 2048
in_features = 4096
out_features = 4096

SMALL_SIZES = {"batch_size": 41, "in_features": 57, "out_features": 150}
# K=4096 dot products, then a 4096-term sum of values near 0.5 (outputs ~2000): fp32 order effects.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(x)).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
