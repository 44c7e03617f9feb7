import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K,
                  ACT: tl.constexpr, HAS_RES: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # y = act(x @ W^T + b) (+ r).  ACT: 0 none, 1 ReLU, 2 exact GELU.
    # Grouped tile order: consecutive programs reuse the same W columns while they sit in L2.
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_size
    pid_n = (pid % per_group) // group_size

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        # tf32x3: three error-compensated TF32 tensor-core products; fp32-accurate (closer to
        # fp64 than cuBLAS SGEMM) and faster than the FMA-only 'ieee' path, which leaves the tensor cores idle.
        acc = tl.dot(a, w, acc, input_precision="tf32x3")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    y = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if ACT == 1:
        y = tl.maximum(y, 0.0)
    if ACT == 2:
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    if HAS_RES:
        y += tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, H, D, E, qk_scale, CAUSAL: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    # q, k, v, o are (B, S, E) with head h in columns [h*D, (h+1)*D): heads are read through strides,
    # so no transpose is ever materialised. Online softmax in base 2 (qk_scale includes log2(e)).
    pid_m = tl.program_id(0)
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    base = b * S * E + h * D
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + base + rm[:, None] * E + rd[None, :], mask=(rm[:, None] < S) & (rd[None, :] < D), other=0.0)
    q = q * qk_scale
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)  # later key blocks are fully masked
    for n0 in range(0, hi, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + base + rn[None, :] * E + rd[:, None], mask=(rn[None, :] < S) & (rd[:, None] < D), other=0.0)
        s = tl.dot(q, kt, input_precision="tf32x3")
        valid = rn[None, :] < S
        if CAUSAL:
            valid = valid & (rn[None, :] <= rm[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + rn[:, None] * E + rd[None, :], mask=(rn[:, None] < S) & (rd[None, :] < D), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="tf32x3")
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + base + rm[:, None] * E + rd[None, :], o, mask=(rm[:, None] < S) & (rd[None, :] < D))


def linear(x2d, lin, act=0, residual=None):
    """act(x2d @ lin.weight^T + lin.bias) (+ residual) through one fused GEMM launch."""
    w = lin.weight.contiguous()
    M, K = x2d.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x2d.device, dtype=x2d.dtype)
    bm, bn, bk = 128, 128, 64
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    linear_kernel[grid](x2d, w, lin.bias, residual if residual is not None else y, y, M, N, K,
                        ACT=act, HAS_RES=residual is not None,
                        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=8, num_stages=3)
    return y


def attention(q, k, v, B, S, H, causal):
    """Scaled-dot-product attention over (B*S, E) projections; returns (B*S, E) in the same layout."""
    E = q.shape[1]
    D = E // H
    o = torch.empty_like(q)
    block_d = max(16, triton.next_power_of_2(D))  # tl.dot needs K >= 16
    bm, bn = 64, 64
    flash_attention_kernel[(triton.cdiv(S, bm), B * H)](q, k, v, o, S, H, D, E, 1.4426950408889634 / D ** 0.5,
                                                         CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d,
                                                         num_warps=4, num_stages=2)
    return o


@triton.jit
def layernorm_kernel(x_ptr, g_ptr, b_ptr, y_ptr, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    v = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    mean = tl.sum(v, axis=0) / N
    d = tl.where(mask, v - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    g = tl.load(g_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * N + cols, d * rstd * g + b, mask=mask)


def layernorm(x2d, ln):
    M, N = x2d.shape
    y = torch.empty_like(x2d)
    block_n = triton.next_power_of_2(N)
    layernorm_kernel[(M,)](x2d, ln.weight, ln.bias, y, N, ln.eps, BLOCK_N=block_n,
                           num_warps=min(8, max(1, block_n // 256)))
    return y


class ModelNew(nn.Module):
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
        with torch.no_grad():
            for ln in (self.ln1, self.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        x2d = x.contiguous().view(B * S, E)
        a = layernorm(x2d, self.ln1)
        o = attention(linear(a, self.q_proj), linear(a, self.k_proj), linear(a, self.v_proj),
                      B, S, self.num_heads, causal=True)
        h = linear(o, self.out_proj, residual=x2d)  # residual add fused into the GEMM epilogue
        m = linear(layernorm(h, self.ln2), self.fc1, act=2)
        return linear(m, self.fc2, residual=h).view(B, S, E)
