"""RMSNorm over the features (learned gain), then a Linear projection: a pre-norm transformer input."""

import torch
import torch.nn as nn

batch_size = 4096
in_features = 4096
out_features = 2048

SMALL_SIZES = {"batch_size": 31, "in_features": 58, "out_features": 47}
# K=4096 fp32 dot products: a different summation order than cuBLAS moves results by ~1e-5.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.norm = nn.RMSNorm(in_features, eps=1e-6)
        self.linear = nn.Linear(in_features, out_features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, in_features) * 3.0]


def get_init_inputs():
    return [in_features, out_features]
