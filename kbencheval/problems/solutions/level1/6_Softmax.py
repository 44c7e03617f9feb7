import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    # One program per row; the whole row stays in registers, so x is read from memory once.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


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
        warps = 16 if block >= 16384 else 8 if block >= 4096 else 4
        softmax_row_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=block, num_warps=warps)
        return y
