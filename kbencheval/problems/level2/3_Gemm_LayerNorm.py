"""Linear followed by LayerNorm over the output features (with a non-trivial affine)."""

import torch
import torch.nn as nn

batch_size = 2048
in_features = 4096
out_features = 4096

SMALL_SIZES = {"batch_size": 29, "in_features": 55, "out_features": 70}
# K=4096 fp32 dot products feed a normalisation: summation order moves results by ~1e-5.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features, eps=1e-5)
        # Random affine so an implementation that ignores gamma/beta fails.
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
