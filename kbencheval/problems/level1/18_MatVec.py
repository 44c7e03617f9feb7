"""Matrix-vector product in fp32: y = A @ x with A (M, K) and x (K, 1)."""

import torch
import torch.nn as nn

M = 12288
K = 65536

# K = 65536 fp32 products: summation-order differences reach ~3e-4 absolute on outputs of ~256.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}
SMALL_SIZES = {"M": 37, "K": 1000}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
