import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scores_softmax_kernel(q_ptr, k_ptr, p_ptr, S, D, qk_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    # Pass 1 streams key blocks to get each row's max and normaliser (online softmax); pass 2
    # recomputes the cheap D-long dot products and writes the final probabilities once.
    b = tl.program_id(1)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + b * S * D + rm[:, None] * D + rd[None, :],
                mask=(rm[:, None] < S) & (rd[None, :] < D), other=0.0)
    q = q * qk_scale  # scale folded in with log2(e) so exp2 can be used
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, S, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + b * S * D + rn[None, :] * D + rd[:, None],
                     mask=(rn[None, :] < S) & (rd[:, None] < D), other=0.0)
        # tf32x3: three error-compensated TF32 tensor-core products; fp32-accurate (closer to
        # fp64 than cuBLAS SGEMM) and faster than the FMA-only 'ieee' path, which leaves the tensor cores idle.
        s = tl.dot(q, kt, input_precision="tf32x3")
        s = tl.where(rn[None, :] < S, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp2(m_i - m_new) + tl.sum(tl.exp2(s - m_new[:, None]), axis=1)
        m_i = m_new
    inv_l = 1.0 / l_i
    for n0 in range(0, S, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + b * S * D + rn[None, :] * D + rd[:, None],
                     mask=(rn[None, :] < S) & (rd[:, None] < D), other=0.0)
        s = tl.dot(q, kt, input_precision="tf32x3")
        p = tl.exp2(s - m_i[:, None]) * inv_l[:, None]
        tl.store(p_ptr + b * S * S + rm[:, None] * S + rn[None, :], p, mask=(rm[:, None] < S) & (rn[None, :] < S))


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q = q.contiguous()
        k = k.contiguous()
        B, S, D = q.shape
        p = torch.empty((B, S, S), device=q.device, dtype=q.dtype)
        block_d = max(16, triton.next_power_of_2(D))  # tl.dot needs K >= 16
        bm, bn = 64, 64
        scores_softmax_kernel[(triton.cdiv(S, bm), B)](q, k, p, S, D, self.scale * 1.4426950408889634,
                                                        BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d,
                                                        num_warps=4, num_stages=2)
        return p
