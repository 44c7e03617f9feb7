"""A pre-norm causal transformer block: x + Attn(LN(x)), then h + MLP(LN(h)) with a GELU MLP."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
seq_len = 1024
embed_dim = 1024
num_heads = 16
mlp_ratio = 4

SMALL_SIZES = {"batch_size": 2, "seq_len": 11, "embed_dim": 40, "num_heads": 2}
# Six fp32 GEMMs, two LayerNorms and a softmax in sequence: order effects reach ~1e-5.
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, mlp_ratio: int):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.ln2 = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, mlp_ratio * embed_dim)
        self.fc2 = nn.Linear(mlp_ratio * embed_dim, embed_dim)
        # Random LayerNorm affines so that an implementation ignoring them fails.
        with torch.no_grad():
            for ln in (self.ln1, self.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        H = self.num_heads

        def heads(t):
            return t.view(B, S, H, E // H).transpose(1, 2)

        a = self.ln1(x)
        o = F.scaled_dot_product_attention(heads(self.q_proj(a)), heads(self.k_proj(a)), heads(self.v_proj(a)),
                                           is_causal=True)
        h = x + self.out_proj(o.transpose(1, 2).reshape(B, S, E))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads, mlp_ratio]
