import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, row_stride, eps, BLOCK: tl.constexpr):
    # All arithmetic in fp32, one rounding to the output dtype at the end (the CPU
    # interpreter truncates there instead of rounding: up to 1 ulp off, inside the bf16 tolerance).
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6, dtype=torch.bfloat16)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        block = triton.next_power_of_2(n_cols)
        if block > 32768:
            raise ValueError(f"rows of {n_cols} do not fit one block; this solution handles up to 32768 columns")
        y = torch.empty_like(x)
        warps = max(4, min(32, block // 1024))
        rms_norm_kernel[(x2.shape[0],)](
            x2, self.norm.weight, y, n_cols, x2.stride(0), self.norm.eps, BLOCK=block, num_warps=warps
        )
        return y
