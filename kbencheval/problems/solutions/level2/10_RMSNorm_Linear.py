import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_rstd_kernel(x_ptr, rstd_ptr, K, eps, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        v = tl.load(x_ptr + row * K + kk, mask=kk < K, other=0.0)
        acc += v * v
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(tl.sum(acc, axis=0) / K + eps))


@triton.jit
def rmsnorm_linear_kernel(x_ptr, g_ptr, rstd_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    # norm(x) @ W^T = rstd[m] * ((x * g) @ W^T): the gain scales the A tile as it loads and the
    # per-row rstd is applied once in the epilogue, so the normalised x is never written.
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
        a = a * tl.load(g_ptr + kk, mask=kk < K, other=0.0)[None, :]
        w = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        # tf32x3: three error-compensated TF32 tensor-core products; fp32-accurate (closer to
        # fp64 than cuBLAS SGEMM) and faster than the FMA-only 'ieee' path, which leaves the tensor cores idle.
        acc = tl.dot(a, w, acc, input_precision="tf32x3")
    rstd = tl.load(rstd_ptr + rm, mask=rm < M, other=0.0)
    y = acc * rstd[:, None] + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.norm = nn.RMSNorm(in_features, eps=1e-6)
        self.linear = nn.Linear(in_features, out_features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        rstd = torch.empty((M,), device=x.device, dtype=torch.float32)
        row_rstd_kernel[(M,)](x, rstd, K, self.norm.eps, BLOCK_K=1024, num_warps=4)
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        bm, bn, bk = 128, 128, 64
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        rmsnorm_linear_kernel[grid](x, self.norm.weight, rstd, w, self.linear.bias, y, M, N, K,
                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=8, num_stages=3)
        return y
