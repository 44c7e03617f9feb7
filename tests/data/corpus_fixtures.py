"""Tiny corpora in each dataset's published schema (column names and Arrow types), for offline tests.

KernelBook rows follow its layout: a PyTorch module `<Name>` with get_inputs() and get_init_inputs()
returning [args, kwargs]; a Triton side with a `call(args)` function and a `<Name>New` module.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kbencheval.dataset import BUNDLED_ROOT

KERNELBOOK_SCHEMA = pa.schema([
    ("python_code", pa.string()), ("triton_code", pa.string()), ("entry_point", pa.string()),
    ("repo_name", pa.string()), ("module_name", pa.string()), ("synthetic", pa.bool_()),
    ("licenses", pa.list_(pa.string())), ("stars", pa.int64()), ("sha", pa.string()),
    ("repo_link", pa.string()), ("uuid", pa.int64()),
])
SAKANA_SCHEMA = pa.schema([
    ("Op_Name", pa.string()), ("Level_ID", pa.int64()), ("Task_ID", pa.int64()), ("Kernel_Name", pa.string()),
    ("CUDA_Runtime", pa.float64()), ("PyTorch_Native_Runtime", pa.float64()),
    ("PyTorch_Compile_Runtime", pa.float64()), ("CUDA_Speedup_Native", pa.float64()),
    ("CUDA_Speedup_Compile", pa.float64()), ("CUDA_Code", pa.string()), ("PyTorch_Code_Module", pa.string()),
    ("PyTorch_Code_Functional", pa.string()), ("Correct", pa.bool_()), ("Max_Diff", pa.float64()),
    ("Error", pa.string()), ("NCU_Profile", pa.string()), ("Torch_Profile", pa.string()),
    ("Clang_Tidy", pa.string()), ("__index_level_0__", pa.int64()),
])


def pytorch_module(name: str, expr: str) -> str:
    return f'''import torch
import torch.nn as nn


class {name}(nn.Module):

    def __init__(self, scale=2.0):
        super({name}, self).__init__()
        self.scale = scale

    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.rand([4, 4, 4, 4])]


def get_init_inputs():
    return [[], {{'scale': 3.0}}]
'''


def triton_module(name: str, body: str) -> str:
    """Inductor-style: one @triton.jit kernel, a call() wrapper, and <name>New calling it."""
    return f'''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def triton_poi_fused_0(in_ptr0, out_ptr0, scale, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    {body}
    tl.store(out_ptr0 + xindex, tmp1, xmask)


def call(args, scale):
    arg0_1, = args
    buf0 = torch.empty_like(arg0_1)
    xnumel = arg0_1.numel()
    triton_poi_fused_0[(triton.cdiv(xnumel, 256),)](arg0_1, buf0, scale, xnumel, XBLOCK=256)
    return buf0,


class {name}New(nn.Module):

    def __init__(self, scale=2.0):
        super({name}New, self).__init__()
        self.scale = scale

    def forward(self, input_0):
        output = call([input_0.contiguous()], self.scale)
        return output[0]
'''


def contaminated_relu() -> tuple[str, str]:
    """The bundled L1_1_ReLU problem with its names changed, and a correct kernel for it."""
    src = (BUNDLED_ROOT / "level1" / "1_ReLU.py").read_text()
    renamed = re.sub(r"\bModel\b", "RectifiedUnit", src)
    renamed = re.sub(r"\bx\b", "activations", renamed)
    renamed = re.sub(r"\bbatch_size\b", "n_rows", renamed).replace("get_init_inputs():\n    return []",
                                                                     "get_init_inputs():\n    return [[], {}]")
    kernel = triton_module("RectifiedUnit", "tmp1 = tl.maximum(tmp0, 0.0)").replace("scale=2.0", "")
    kernel = kernel.replace("self.scale = scale", "self.scale = 1.0")
    return renamed, kernel


def kernelbook_rows() -> list[dict]:
    base = dict(repo_name="someone/repo", synthetic=False, licenses=["MIT"], stars=3, sha="0" * 40,
                repo_link="https://github.com/someone/repo/tree/" + "0" * 40)
    relu_src, relu_kernel = contaminated_relu()
    rows = [
        # correct: y = x * scale + 1
        dict(python_code=pytorch_module("ScaleShift", "x * self.scale + 1.0"),
             triton_code=triton_module("ScaleShift", "tmp1 = tmp0 * scale + 1.0"), entry_point="ScaleShift",
             module_name="ScaleShift", uuid=101),
        # the same pair with other names: a duplicate
        dict(python_code=pytorch_module("ScaleShift2", "x * self.scale + 1.0").replace("x", "inp"),
             triton_code=triton_module("ScaleShift2", "tmp1 = tmp0 * scale + 1.0"), entry_point="ScaleShift2",
             module_name="ScaleShift2", uuid=102),
        # wrong kernel: forgets the square
        dict(python_code=pytorch_module("SquareScale", "x * x * self.scale"),
             triton_code=triton_module("SquareScale", "tmp1 = tmp0 * scale"), entry_point="SquareScale",
             module_name="SquareScale", uuid=103),
        # a bundled benchmark problem in disguise, with a correct kernel
        dict(python_code=relu_src, triton_code=relu_kernel, entry_point="RectifiedUnit",
             module_name="RectifiedUnit", uuid=104),
        # no kernel at all
        dict(python_code=pytorch_module("Empty", "x"), triton_code="", entry_point="Empty", module_name="Empty",
             uuid=105),
    ]
    return [{**base, **r} for r in rows]


def write_kernelbook(folder: Path, rows: list[dict] | None = None, fmt: str = "parquet") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows if rows is not None else kernelbook_rows(), schema=KERNELBOOK_SCHEMA)
    if fmt == "parquet":
        pq.write_table(table, folder / "dataset_permissive.parquet")
    else:
        import json
        (folder / "dataset_permissive.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    return folder


SAKANA_MODULE = (BUNDLED_ROOT / "level1" / "3_SiLU.py").read_text()
SAKANA_FUNCTIONAL = '''import torch
import torch.nn as nn


def module_fn(x):
    return x * torch.sigmoid(x)


class Model(nn.Module):
    def forward(self, x, fn=module_fn):
        return fn(x)
'''
SAKANA_CUDA = '''#include <torch/extension.h>
__global__ void silu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (1.0f + expf(-x[i]));
}
torch::Tensor forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    silu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "SiLU forward"); }
'''


def sakana_rows() -> list[dict]:
    row = dict(Op_Name="3_SiLU", Level_ID=1, Task_ID=3, Kernel_Name="silu_vectorized_base", CUDA_Runtime=0.01,
               PyTorch_Native_Runtime=0.012, PyTorch_Compile_Runtime=0.02, CUDA_Speedup_Native=1.2,
               CUDA_Speedup_Compile=2.0, CUDA_Code=SAKANA_CUDA, PyTorch_Code_Module=SAKANA_MODULE,
               PyTorch_Code_Functional=SAKANA_FUNCTIONAL, Correct=True, Max_Diff=1e-7, Error=None,
               NCU_Profile=None, Torch_Profile=None, Clang_Tidy=None, __index_level_0__=7)
    broken = {**row, "Kernel_Name": "silu_failed", "CUDA_Code": "", "Correct": False, "Error": "compile failed",
              "__index_level_0__": 8}
    return [row, broken]


def write_sakana(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sakana_rows(), schema=SAKANA_SCHEMA), folder / "level_1.parquet")
    return folder


INDUCTOR_PYTORCH = '''import torch
import torch.nn as nn


class AddRelu(nn.Module):

    def __init__(self):
        super(AddRelu, self).__init__()

    def forward(self, x, y):
        return torch.relu(x + y)


def get_inputs():
    return [torch.rand([4, 4, 4, 4]), torch.rand([4, 4, 4, 4])]


def get_init_inputs():
    return [[], {}]
'''

# The Triton side as KernelBook publishes it: TorchInductor output with its runtime helpers.
INDUCTOR_TRITON = '''import torch
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor


@triton.jit
def triton_poi_fused_add_relu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 256
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + x0, xmask)
    tmp1 = tl.load(in_ptr1 + x0, xmask)
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0, tl.int32)
    tmp4 = triton_helpers.maximum(tmp3, tmp2)
    tl.store(out_ptr0 + x0, tmp4, xmask)


def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    assert_size_stride(arg0_1, (4, 4, 4, 4), (64, 16, 4, 1))
    assert_size_stride(arg1_1, (4, 4, 4, 4), (64, 16, 4, 1))
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((4, 4, 4, 4), (64, 16, 4, 1), torch.float32)
        get_raw_stream(0)
        triton_poi_fused_add_relu_0[grid(256)](arg0_1, arg1_1, buf0, 256, XBLOCK=128, num_warps=4, num_stages=1)
        del arg0_1
        del arg1_1
    return reinterpret_tensor(buf0, (4, 4, 4, 4), (64, 16, 4, 1), 0),


class AddReluNew(nn.Module):

    def __init__(self):
        super(AddReluNew, self).__init__()

    def forward(self, input_0, input_1):
        arg0_1 = input_0
        arg1_1 = input_1
        output = call([arg0_1, arg1_1])
        return output[0]
'''


def inductor_row() -> dict:
    return dict(python_code=INDUCTOR_PYTORCH, triton_code=INDUCTOR_TRITON, entry_point="AddRelu",
                module_name="AddRelu", uuid=201, repo_name="someone/repo", synthetic=False, licenses=["MIT"],
                stars=3, sha="0" * 40, repo_link="https://github.com/someone/repo/tree/" + "0" * 40)
