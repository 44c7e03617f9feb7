"""Batched attention scores: softmax(q @ k^T * scale) over the key axis (no value product)."""

import torch
import torch.nn as nn

batch_size = 32
seq_len = 2048
head_dim = 64
scale = 0.125

SMALL_SIZES = {"batch_size": 3, "seq_len": 13, "head_dim": 24}
# Probabilities are ~1/seq_len, so the default atol would accept a uniform answer: judge them relatively.
TOLERANCE = {"atol": 1e-6, "rtol": 1e-3}
# A softmax over matmul logits is ill-conditioned at large inputs: TF32 matmul rounding grows with the
# logits, so x10/x100 stress trials would fail honest TF32 kernels (they did).
INPUT_DOMAIN = "unit_scale"


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, head_dim), torch.randn(batch_size, seq_len, head_dim)]


def get_init_inputs():
    return [scale]
