"""Batched matrix multiply in fp32: C[b] = A[b] @ B[b]."""

import torch
import torch.nn as nn

batch_size = 128
m = 512
k = 1024
n = 512

# K = 1024 fp32 products on outputs of ~32: a reordered sum differs by up to ~5e-4 absolute.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}
SMALL_SIZES = {"batch_size": 3, "m": 37, "k": 50, "n": 29}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
