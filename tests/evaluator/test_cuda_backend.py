"""The secondary backend: kernels built with load_inline. On CPU the extension is C++; on a GPU the
same path carries CUDA sources. Its calls count as launches and its outputs as kernel-written. On the
CPU its work cannot be attributed (no device record), so it is refused there (issue #43)."""

from __future__ import annotations

import pytest

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval import Status

RELU = next(p for p in load_bundled(1) if p.problem_id == 1)

EXTENSION = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
torch::Tensor relu_out(torch::Tensor x) {
    auto y = torch::empty_like(x);
    auto xa = x.contiguous().data_ptr<float>();
    auto ya = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) ya[i] = xa[i] > 0.f ? xa[i] : 0.f;
    return y;
}
"""
ext = load_inline(name="tf_relu_ext", cpp_sources=source, functions=["relu_out"], verbose=False)
'''


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvalConfig(device="cpu", backend="cuda", timeout_s=300, trials=2)) as ev:
        yield ev


@pytest.mark.slow  # compiles a C++/CUDA extension: ~70 s
def test_load_inline_kernel_is_refused_on_the_cpu(evaluator):
    code = EXTENSION + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_out(x)\n"
    result = evaluator.evaluate(RELU, code)
    assert result.status == Status.REJECTED and "cannot be attributed" in result.error, result.error
    assert result.checks["launches"] == [1]  # its call counted as a launch; refused after its first trial


def test_load_inline_decoy_with_torch_compute_is_rejected(evaluator):
    code = EXTENSION + (
        "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        ext.relu_out(x)\n        return torch.clamp(x, min=0)\n")
    result = evaluator.evaluate(RELU, code)
    assert result.status == Status.REJECTED and "aten.clamp" in result.error


def test_cuda_backend_needs_load_inline(evaluator):
    result = evaluator.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.REJECTED and "load_inline" in result.error
