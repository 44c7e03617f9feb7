"""Square matrix multiply in fp32: C = A @ B with A, B of shape (N, N)."""

import torch
import torch.nn as nn

N = 4096

# K = 4096 fp32 products on outputs of ~64: a split-K or reordered sum differs by up to ~1e-3 absolute.
TOLERANCE = {"atol": 2e-3, "rtol": 1e-4}
SMALL_SIZES = {"N": 45}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
