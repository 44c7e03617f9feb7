"""Which path times a candidate (issue #43): its captured CUDA graph, or eager calls when the graph does not
compute what an eager call does. A CUDA kernel launched `<<<blocks, threads>>>` runs on the legacy default
stream, which torch's graph capture does not record: its replays left stale outputs and the honest kernel
was `incorrect` in a timed iteration. The CPU tests check the decision's logic with a stand-in graph; the
GPU tests (marked gpu) run real default-stream kernels, our own, in KernelBench's layout:

    pytest -q tests/evaluator/test_timing_paths.py            # on a GPU machine: the gpu tests run too
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from kbencheval.dataset import parse_problem
from kbencheval.eval.contract.inputs import load_problem_module
from kbencheval.eval.contract.protocol import TimingSpec, Trial
from kbencheval.eval import Status
from kbencheval.eval.contract.timing import Timer, digests_agree, outputs_digest

ADD_SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn
    rows, cols = 4096, 4096
    SMALL_SIZES = {"rows": 4, "cols": 64}
    class Model(nn.Module):
        def forward(self, a, b):
            return a + b
    def get_inputs():
        return [torch.randn(rows, cols), torch.randn(rows, cols)]
    def get_init_inputs():
        return []
    ''')
MATMUL_SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn
    M, K, N = 1024, 1024, 1024
    class Model(nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)
    def get_inputs():
        return [torch.randn(M, K), torch.randn(K, N)]
    def get_init_inputs():
        return []
    ''')


# -- the decision, on the CPU ---------------------------------------------------------------------------

def outputs_agree(a: list, b: list) -> bool:
    return digests_agree(outputs_digest(a), b)


def test_outputs_agree_up_to_rounding_only():
    torch.manual_seed(0)
    out = torch.randn(64, 4096)
    jitter = out * (1 + 4 * torch.finfo(torch.float32).eps * torch.randn_like(out).sign())
    assert outputs_agree([out], [out.clone()]) and outputs_agree([out], [jitter])
    assert not outputs_agree([torch.full_like(out, float("nan"))], [out])  # a replay that wrote nothing
    assert not outputs_agree([torch.randn(64, 4096)], [out])  # stale outputs of other inputs
    assert not outputs_agree([out[:32]], [out]) and not outputs_agree([out], [out, out])


class _StandInGraph:
    """A captured graph's replay, on the CPU: `computes` writes the model's output, else nothing (the
    kernel ran on a stream the capture did not record)."""

    def __init__(self, timer: Timer, computes: bool):
        self.timer, self.computes = timer, computes

    def replay(self):
        if self.computes:
            self.timer.static_out[0].copy_(self.timer.model(*self.timer.static_in))


@pytest.mark.parametrize("computes", [True, False], ids=["replay_computes", "replay_writes_nothing"])
def test_a_graph_is_kept_only_if_its_replay_computes_what_an_eager_call_does(computes):
    module = load_problem_module(ADD_SOURCE, {"rows": 4, "cols": 64})
    timer = Timer(module.Model(), module, torch.device("cpu"), TimingSpec(enabled=True, warmup=0), Trial(seed=1))
    first = module.Model()(*timer.static_in)  # what the capture's own run left in the outputs
    timer.static_out, timer.graph = [first.clone()], _StandInGraph(timer, computes)
    assert timer.replay_matches_eager(Trial(seed=1)) is computes


# -- real default-stream kernels (GPU) ------------------------------------------------------------------

ADD_KERNEL = r'''
__global__ void add_kernel(const float* a, const float* b, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    long n = a.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    add_kernel<<<blocks, threads LAUNCH_STREAM>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
'''
MATMUL_KERNEL = r'''
#define TILE 16
__global__ void matmul_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x, bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
torch::Tensor tiled_matmul(torch::Tensor a, torch::Tensor b) {
    int M = a.size(0), K = a.size(1), N = b.size(1);
    auto c = torch::empty({M, N}, a.options());
    dim3 threads(TILE, TILE), blocks((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    matmul_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
    return c;
}
'''


def cuda_candidate(kernel: str, function: str, forward: str, name: str, stream: str = "") -> str:
    """A ModelNew whose kernel is built with load_inline; `stream`: the launch's stream argument, if any."""
    source = "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n" + \
        kernel.replace("LAUNCH_STREAM", stream)
    return "```python\n" + textwrap.dedent(f'''
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        cuda_source = {source!r}
        ext = load_inline(name={name!r}, cpp_sources="torch::Tensor {function}(torch::Tensor a, torch::Tensor b);",
                          cuda_sources=cuda_source, functions=[{function!r}], verbose=False)

        class ModelNew(nn.Module):
            def forward(self, a, b):
        ''') + textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8) + "\n```"


@pytest.fixture(scope="module")
def gpu_cuda_eval():
    from kbencheval.eval import EvalConfig, Evaluator

    with Evaluator(EvalConfig(device="cuda", backend="cuda", iters=20, timeout_s=600)) as ev:
        yield ev


ADD = parse_problem(ADD_SOURCE, name="DefaultStreamAdd")
MATMUL = parse_problem(MATMUL_SOURCE, name="DefaultStreamMatmul")


@pytest.mark.gpu
def test_a_default_stream_elementwise_add_is_correct_and_timed_eagerly(gpu_cuda_eval):
    code = cuda_candidate(ADD_KERNEL, "vector_add", "return ext.vector_add(a, b)", "tf_add_default")
    result = gpu_cuda_eval.evaluate(ADD, code)
    assert result.status == Status.CORRECT, result.error
    assert result.checks["timing_path"] == "eager", result.checks.get("timing_trust")
    assert "default stream" in result.checks["timing_trust"]
    assert 0.5 < result.speedup < 2.0, result.speedup  # memory-bound, as torch's own add


@pytest.mark.gpu
def test_the_same_add_on_the_current_stream_is_timed_as_a_graph(gpu_cuda_eval):
    code = cuda_candidate(ADD_KERNEL, "vector_add", "return ext.vector_add(a, b)", "tf_add_current",
                          stream=", 0, at::cuda::getCurrentCUDAStream()")
    result = gpu_cuda_eval.evaluate(ADD, code)
    assert result.status == Status.CORRECT, result.error
    assert result.checks["timing_path"] == "cuda_graph" and result.checks["device_kernels"]["source"] == "graph"
    assert 0.5 < result.speedup < 2.0, result.speedup


@pytest.mark.gpu
def test_a_default_stream_tiled_matmul_is_correct(gpu_cuda_eval):
    code = cuda_candidate(MATMUL_KERNEL, "tiled_matmul", "return ext.tiled_matmul(a, b)", "tf_matmul_default")
    result = gpu_cuda_eval.evaluate(MATMUL, code)
    assert result.status == Status.CORRECT, result.error
    assert result.checks["timing_path"] == "eager"
    assert 0.01 < result.speedup < 1.5, result.speedup  # a 16x16 tiled fp32 matmul against cuBLAS


@pytest.mark.gpu
def test_computing_only_when_not_captured_gains_no_speedup(gpu_cuda_eval):
    """Honest whenever it runs eagerly, nothing while captured: its graph is empty, so a replay-timed
    figure would be a launch of nothing. It is timed eagerly instead, computing."""
    forward = """
        if torch.cuda.is_current_stream_capturing():
            return torch.empty_like(a)
        return ext.vector_add(a, b)
        """
    code = cuda_candidate(ADD_KERNEL, "vector_add", forward, "tf_add_lazy",
                          stream=", 0, at::cuda::getCurrentCUDAStream()")
    result = gpu_cuda_eval.evaluate(ADD, code)
    assert result.status != Status.CORRECT or (result.checks["timing_path"] == "eager" and result.speedup < 2.0), \
        (result.status, result.speedup, result.checks.get("timing_trust"))
