"""Prompt templates: a PyTorch problem -> chat messages asking for a faster `ModelNew`.

    from kbencheval.prompts import build_prompt, feedback_message, strip_thinking
    messages = build_prompt(problem.source, backend="triton", style="one_shot")
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": feedback_message(result)}]

Styles: zero_shot (instructions only), one_shot (one worked example), few_shot (two examples),
raicl (retrieval-augmented: the examples are the corpus's nearest solved problems, see
`prompt_builder` and kbencheval/rag/).
Backends: triton (@triton.jit kernels) and cuda (torch.utils.cpp_extension.load_inline). The
examples are deliberately small: the tiny test model has a short context, and real models need
the format more than the tutorial. The Triton examples are run under the interpreter in
tests/data/test_prompts.py, so they stay correct.
"""

from __future__ import annotations

from typing import Any, Callable

from kbencheval.extract import strip_thinking  # noqa: F401  (re-exported: prompts own the LLM text format)

BACKENDS = ("triton", "cuda")
STYLES = ("zero_shot", "one_shot", "few_shot")  # built-in examples
RAICL = "raicl"  # retrieved examples (prompt_builder)

_SYSTEM = ("You are an expert GPU kernel engineer. You rewrite PyTorch models as custom {kernel} kernels "
           "that compute the same result, faster.")
_KERNEL_NAME = {"triton": "Triton", "cuda": "CUDA"}
_RULES = {
    "triton": "Write the kernels with @triton.jit (import triton and triton.language as tl).",
    "cuda": "Write the kernels in CUDA C++ and build them with torch.utils.cpp_extension.load_inline.",
}

# ---- worked examples (our own): a PyTorch reference and a kernel answer ----
_REF_SILU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)
'''

_TRITON_SILU = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = x / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        silu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
'''

_REF_SOFTMAX = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):  # x: (rows, cols)
        return torch.softmax(x, dim=1)
'''

_TRITON_SOFTMAX = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return y
'''

_CUDA_SILU = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void silu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (1.0f + expf(-x[i]));
}

torch::Tensor silu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    silu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="silu_ext", cpp_sources="torch::Tensor silu(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["silu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.silu(x.contiguous())
'''

_REF_FMA = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b, c):
        return a * b + c
'''

_CUDA_FMA = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void fma_kernel(const float* a, const float* b, const float* c, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaf(a[i], b[i], c[i]);
}

torch::Tensor fma3(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    auto y = torch::empty_like(a);
    int64_t n = a.numel();
    fma_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                         c.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="fma_ext", cpp_sources="torch::Tensor fma3(torch::Tensor a, torch::Tensor b, torch::Tensor c);",
                  cuda_sources=cuda_src, functions=["fma3"])


class ModelNew(nn.Module):
    def forward(self, a, b, c):
        return ext.fma3(a.contiguous(), b.contiguous(), c.contiguous())
'''

EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "triton": [(_REF_SILU, _TRITON_SILU), (_REF_SOFTMAX, _TRITON_SOFTMAX)],
    "cuda": [(_REF_SILU, _CUDA_SILU), (_REF_FMA, _CUDA_FMA)],
}


def _fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def build_prompt(problem_source: str, *, backend: str = "triton", style: str = "one_shot",
                 precision: str | None = None, gpu_notes: str | None = None,
                 examples: list[tuple[str, str]] | None = None) -> list[dict]:
    """System + user messages asking for `ModelNew` (same interface as `Model`) in one python block.

    style=raicl shows `examples` ((PyTorch program, kernel code) pairs, retrieved for this problem)
    in place of the built-in ones; `prompt_builder` retrieves them.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend '{backend}'; choose one of {', '.join(BACKENDS)}")
    if style not in STYLES + (RAICL,):
        raise ValueError(f"unknown prompt style '{style}'; choose one of {', '.join(STYLES + (RAICL,))}")
    if (examples is not None) != (style == RAICL):
        raise ValueError("pass examples= exactly when style='raicl' (use prompt_builder to retrieve them)")
    kernel = _KERNEL_NAME[backend]
    if style == RAICL:
        shown = list(examples)
    else:
        shown = EXAMPLES[backend][: {"zero_shot": 0, "one_shot": 1, "few_shot": 2}[style]]
    parts = [
        f"Rewrite the PyTorch program below as `class ModelNew(nn.Module)` that uses custom {kernel} kernels. "
        f"{_RULES[backend]} ModelNew must take the same __init__ and forward arguments as Model and return the "
        "same outputs. All the computation in forward must happen in your kernels: do not call torch operators "
        "(torch.matmul, F.relu, ...) to compute the result; allocating outputs (torch.empty) and views are fine."
    ]
    if precision:
        parts.append(f"Inputs are {precision}; results must match the reference within that precision's tolerance.")
    if gpu_notes:
        parts.append(f"Target hardware: {gpu_notes}")
    for i, (ref, answer) in enumerate(shown, 1):
        parts.append(f"Example {i}. PyTorch program:\n{_fence(ref)}\nAnswer:\n{_fence(answer)}")
    parts.append(f"Your PyTorch program:\n{_fence(problem_source)}")
    parts.append("Reply with the complete code (imports, kernels and ModelNew) in one ```python block.")
    return [{"role": "system", "content": _SYSTEM.format(kernel=kernel)},
            {"role": "user", "content": "\n\n".join(parts)}]


def prompt_builder(*, backend: str = "triton", style: str = "one_shot", precision: str | None = None,
                   gpu_notes: str | None = None, raicl_index: str = "", raicl_k: int = 2,
                   raicl_model: str = "") -> Callable[[str], list[dict]]:
    """problem source -> messages, with the retrieval index opened once (style=raicl) for every problem.

    For raicl, the examples are the `raicl_k` nearest corpus problems of the same backend that are not
    the problem itself nor overlap it (kbencheval.rag.index.Retriever); `raicl_model`, if set, must
    be the embedding model the index was built with. A problem with no clean neighbour gets no example.
    """
    if style != RAICL:
        return lambda source: build_prompt(source, backend=backend, style=style, precision=precision,
                                           gpu_notes=gpu_notes)
    if not raicl_index:
        raise ValueError("prompt_style=raicl needs raicl_index=FOLDER: an index built by `kbench rag build`")
    from kbencheval.rag.index import Retriever  # heavy (faiss, sentence-transformers): only raicl needs it

    retriever = Retriever.load(raicl_index, model=raicl_model)

    def build(source: str) -> list[dict]:
        found = retriever.search(source, raicl_k, backend=backend)
        return build_prompt(source, backend=backend, style=RAICL, precision=precision, gpu_notes=gpu_notes,
                            examples=[(e.problem_source, e.answer) for e in found])

    return build


_NEXT_STEP = {
    "format_error": "Your reply had no usable ```python block defining class ModelNew.",
    "rejected": "Your code was rejected because it broke the rules",
    "compile_error": "Your code failed to import or compile.",
    "runtime_error": "Your code crashed while running.",
    "timeout": "Your code ran past the time limit (a hang or a very slow kernel).",
    "incorrect": "Your code ran but its outputs do not match the reference.",
}


def feedback_message(result: Any, *, max_chars: int = 1500) -> str:
    """The next user turn after an evaluation (an EvalResult or its dict); keeps the model's task in view."""
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    status = getattr(d.get("status"), "value", d.get("status"))
    detail = (d.get("feedback") or d.get("error") or "").strip()
    if len(detail) > max_chars:
        detail = detail[:max_chars] + " ...[truncated]"
    if status == "correct":
        speedup = d.get("speedup")
        if speedup is None:
            head = "Your kernel is correct (its speed was not measured on this device)."
        else:
            pace = "faster than" if speedup >= 1 else "slower than"
            head = f"Your kernel is correct and {speedup:.2f}x the speed of PyTorch ({pace} the reference)."
        ask = "Make it faster while keeping it correct."
    else:
        head = _NEXT_STEP.get(status, f"Evaluation status: {status}.")
        if status == "rejected":
            head += ":" if detail else "."
        ask = "Fix the problem."
    text = f"{head}\n{detail}" if detail else head
    return f"{text}\n\n{ask} Reply with the complete code in one ```python block."
