"""Linear followed by a softmax over the output features (a classifier head)."""

import torch
import torch.nn as nn

batch_size = 2048
in_features = 4096
out_features = 4096

SMALL_SIZES = {"batch_size": 35, "in_features": 49, "out_features": 150}
# Probabilities are ~1/out_features, so the default atol would accept a uniform answer: judge them
# relatively; K=4096 fp32 dot products shift logits by ~1e-5, i.e. probabilities by ~1e-5 relative.
TOLERANCE = {"atol": 1e-6, "rtol": 1e-3}
# x10/x100 inputs scale that logit error with them past the tolerance: the honest tf32x3 solution failed
# x100 trials, so only the shrinking stress transform.
INPUT_DOMAIN = "unit_scale"


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
