"""Linear layer epilogue chain: y = relu(x @ W^T + b) * scale."""

import torch
import torch.nn as nn

batch_size = 2048
in_features = 4096
out_features = 4096
scale = 0.5

SMALL_SIZES = {"batch_size": 37, "in_features": 50, "out_features": 45}
# K=4096 fp32 dot products: a different summation order than cuBLAS moves results by ~1e-5.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
