"""Multi-head self-attention: Q/K/V projections, scaled-dot-product attention, output projection."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 1024
embed_dim = 1024
num_heads = 16

SMALL_SIZES = {"batch_size": 2, "seq_len": 13, "embed_dim": 40, "num_heads": 2}
# Four fp32 GEMMs around a softmax: summation order and exp rounding move results by ~1e-6..1e-5.
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
# A softmax over matmul logits is ill-conditioned at large inputs: TF32 matmul rounding grows with the
# logits, so x10/x100 stress trials would fail honest TF32 kernels (they did).
INPUT_DOMAIN = "unit_scale"


class Model(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        H = self.num_heads

        def heads(t):
            return t.view(B, S, H, E // H).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)))
        return self.out_proj(o.transpose(1, 2).reshape(B, S, E))


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
