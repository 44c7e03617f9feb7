import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_gelu_residual_kernel(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                GROUP_M: tl.constexpr):
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
    h = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    gelu = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    res = tl.load(r_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], gelu + res, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        residual = residual.contiguous()
        w = self.linear.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        bm, bn, bk = 128, 128, 64
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        linear_gelu_residual_kernel[grid](x, w, self.linear.bias, residual, y, M, N, K,
                                          BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                          num_warps=8, num_stages=3)
        return y
