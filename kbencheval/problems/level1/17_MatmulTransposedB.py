"""Matrix multiply with a transposed right operand: C = A @ B.T, A (M, K), B (N, K), fp32."""

import torch
import torch.nn as nn

M = 2048
N = 4096
K = 4096

# K = 4096 fp32 products on outputs of ~64: a split-K or reordered sum differs by up to ~1e-3 absolute.
TOLERANCE = {"atol": 2e-3, "rtol": 1e-4}
SMALL_SIZES = {"M": 33, "N": 47, "K": 61}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(M, K), torch.randn(N, K)]


def get_init_inputs():
    return []
