"""Linear + exact (erf) GELU + residual: y = gelu(x @ W^T + b) + residual."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2048
in_features = 4096
out_features = 4096

SMALL_SIZES = {"batch_size": 33, "in_features": 61, "out_features": 47}
# K=4096 fp32 dot products: a different summation order than cuBLAS moves results by ~1e-5.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) + residual


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
