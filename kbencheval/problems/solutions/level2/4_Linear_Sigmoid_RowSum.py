import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_sigmoid_partial_sum_kernel(x_ptr, w_ptr, b_ptr, part_ptr, M, N, K, NUM_N_TILES,
                                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                      GROUP_M: tl.constexpr):
    # The (M, N) activation never reaches memory: each tile reduces its columns to one partial per row.
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
    h = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    s = tl.where(rn[None, :] < N, tl.sigmoid(h), 0.0)
    # Per-tile partials (not atomics) keep the result deterministic.
    tl.store(part_ptr + rm * NUM_N_TILES + pid_n, tl.sum(s, axis=1), mask=rm < M)


@triton.jit
def sum_partials_kernel(part_ptr, y_ptr, M, NUM_N_TILES, BLOCK_M: tl.constexpr, BLOCK_T: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rt = tl.arange(0, BLOCK_T)
    p = tl.load(part_ptr + rm[:, None] * NUM_N_TILES + rt[None, :],
                mask=(rm[:, None] < M) & (rt[None, :] < NUM_N_TILES), other=0.0)
    tl.store(y_ptr + rm, tl.sum(p, axis=1), mask=rm < M)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.linear.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        bm, bn, bk = 128, 128, 64
        n_tiles = triton.cdiv(N, bn)
        partials = torch.empty((M, n_tiles), device=x.device, dtype=torch.float32)
        y = torch.empty((M, 1), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, bm) * n_tiles,)
        linear_sigmoid_partial_sum_kernel[grid](x, w, self.linear.bias, partials, M, N, K, n_tiles,
                                                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                                num_warps=8, num_stages=3)
        sum_partials_kernel[(triton.cdiv(M, 64),)](partials, y, M, n_tiles,
                                                   BLOCK_M=64, BLOCK_T=triton.next_power_of_2(n_tiles))
        return y
