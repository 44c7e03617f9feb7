import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def log_softmax_row_kernel(x_ptr, y_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    # One program per row, whole row in registers: one read, one write.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)
    lse = tl.log(tl.sum(tl.exp(shifted), axis=0))
    tl.store(y_ptr + row * n_cols + cols, shifted - lse, mask=mask)


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
        log_softmax_row_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=block, num_warps=warps)
        return y
