import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2_normalize_kernel(x_ptr, y_ptr, n_cols, row_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0)
    norm = tl.maximum(tl.sqrt(tl.sum(x * x, axis=0)), eps)
    tl.store(y_ptr + row * n_cols + cols, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        block = triton.next_power_of_2(n_cols)
        if block > 32768:
            raise ValueError(f"rows of {n_cols} do not fit one block; this solution handles up to 32768 columns")
        y = torch.empty_like(x)
        warps = max(4, min(32, block // 1024))
        l2_normalize_kernel[(n_rows,)](x, y, n_cols, x.stride(0), 1e-12, BLOCK=block, num_warps=warps)
        return y
