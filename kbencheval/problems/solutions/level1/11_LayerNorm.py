import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, row_stride, eps, BLOCK: tl.constexpr):
    # One program per row, whole row in registers; the variance is taken around the mean
    # (two-step), which stays accurate for inputs with a large offset.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n_cols + cols, centered * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim, eps=1e-5)
        nn.init.normal_(self.ln.weight, mean=1.0, std=0.2)
        nn.init.normal_(self.ln.bias, mean=0.0, std=0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        block = triton.next_power_of_2(n_cols)
        if block > 32768:
            raise ValueError(f"rows of {n_cols} do not fit one block; this solution handles up to 32768 columns")
        y = torch.empty_like(x)
        warps = max(4, min(32, block // 1024))
        layer_norm_kernel[(x2.shape[0],)](
            x2, self.ln.weight, self.ln.bias, y, n_cols, x2.stride(0), self.ln.eps, BLOCK=block, num_warps=warps
        )
        return y
