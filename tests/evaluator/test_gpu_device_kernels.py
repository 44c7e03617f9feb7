"""Device-side attribution on a real GPU (issue 17): the kernel names this stack reports, every bundled
solution running only its own kernels, and attacks whose library compute only the device's record shows.
`benchmarks/evaluator_gpu_check.sh` runs this file with -s, so the printed names reach the log."""

from __future__ import annotations

import re
import textwrap

import pytest
import triton
import triton.language as tl

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval import Status
from tests.adversarial.test_adversarial import HEADER, RELU

pytestmark = pytest.mark.gpu

MATMUL = next(p for p in load_bundled(1) if p.problem_id == 15)  # fp32 C = A @ B: cuBLAS is one call away
HONEST_MATMUL = MATMUL.solution_source.replace("class ModelNew(", "class Honest(")
TOUCH = """
@triton.jit
def touch_kernel(ptr, n, BLOCK: tl.constexpr):      # writes nothing (n=0): the decoy the recorder wants
    offs = tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros((BLOCK,), tl.float32), mask=offs < n)
"""
BUNDLED = [p for level in (1, 2, 3) for p in load_bundled(level) if p.solution_source]


@triton.jit
def probe_relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def test_device_kernel_names_on_this_gpu():
    """Diagnostic, in this process (no sandbox): what the captured graph and the profiler call the kernels of
    a Triton ReLU, a cuBLAS matmul, ATen compute, ATen copies and fills, and an Inductor kernel; then their
    classes. Every name is printed before any assertion, so a pattern that misses can be fixed from the log."""
    import json

    import torch

    from kbencheval.eval.contract.device_kernels import kernel_class, kernel_violation
    from kbencheval.eval.contract.timing import graph_report, profiled_report

    x, y = torch.randn(1 << 16, device="cuda"), torch.empty(1 << 16, device="cuda")
    a = torch.randn(512, 512, device="cuda")
    cases = {
        "triton": lambda: probe_relu_kernel[(64,)](x, y, x.numel(), BLOCK=1024),
        "cublas": lambda: torch.matmul(a, a),
        "aten_compute": lambda: (torch.relu(x) + 1).sum(),
        "memory_only": lambda: (torch.zeros_like(x), torch.full((4,), 2.0, device="cuda"), a.t().contiguous(),
                                x.clone(), x.to(torch.float16), a.to(torch.bfloat16).float(), torch.arange(9, device="cuda")),
    }
    try:
        compiled = torch.compile(lambda t: torch.relu(t) * 2)
        compiled(x)
        cases["inductor"] = lambda: compiled(x)
    except Exception as e:  # noqa: BLE001 - reported below
        print("torch.compile failed:", type(e).__name__, str(e)[:300])
    reports = {}
    for name, fn in cases.items():
        with torch.no_grad():
            fn()  # compile, load and warm outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(graph):
                fn()
            graph.instantiate()
            graph.replay()
            torch.cuda.synchronize()
            reports[name] = {"graph": graph_report(graph), "profiler": profiled_report(fn)}
    for name, by_source in reports.items():
        for source, report in by_source.items():
            classes = {k: kernel_class(k) for k in report.get("kernels", {})}
            print(f"\n== {name} / {source}: nodes {report.get('nodes')} error {report.get('error')}")
            print(json.dumps(classes, indent=1))
    for name, by_source in reports.items():
        for source, report in by_source.items():
            where = f"{name} via {source}"
            assert "error" not in report, (where, report)
            kernels = report["kernels"]
            if name == "triton":
                assert "probe_relu_kernel" in kernels and kernel_violation(kernels, []) is None, (where, kernels)
            elif name == "memory_only":  # the kernels behind ops every candidate may call: never a violation
                assert kernel_violation(kernels, []) is None, (where, kernels)
            elif name == "cublas":
                assert kernel_violation(kernels, []) is not None and kernel_violation(kernels, ["aten.mm"]) is None, \
                    (where, kernels)
                assert {kernel_class(k) for k in kernels} & {"cuBLAS", "CUTLASS"}, (where, kernels)
            elif name == "aten_compute":
                assert "torch (ATen)" in kernel_violation(kernels, []), (where, kernels)
            elif name == "inductor":
                assert "Inductor" in kernel_violation(kernels, []), (where, kernels)
    assert "inductor" in reports, "torch.compile did not work in this process (see the printed error)"


@pytest.fixture(scope="module")
def gpu_quick():
    with Evaluator(EvalConfig(device="cuda", iters=10, trials=2, timeout_s=240)) as ev:
        yield ev


@pytest.mark.parametrize("problem", BUNDLED, ids=lambda p: p.key)
def test_device_bundled_solutions_run_only_their_own_kernels(gpu_quick, problem):
    """No false rejection: every bundled solution is correct, and the device ran its Triton kernels and
    nothing of a library's beyond what the problem allows (the conv problems' cuDNN)."""
    from kbencheval.eval.contract.device_kernels import kernel_class

    result = gpu_quick.evaluate(problem, "```python\n" + problem.solution_source + "```")
    ran = result.checks.get("device_kernels")
    print(problem.key, result.checks.get("timing_trust"), ran)
    assert result.status == Status.CORRECT, (problem.key, result.error, ran)
    assert ran and "error" not in ran, ran
    own = set(re.findall(r"@triton\.jit\s*\ndef (\w+)", problem.solution_source))
    assert own & set(ran["kernels"]), (own, ran)
    if not problem.allowed_torch_ops:
        assert all(kernel_class(k) is None for k in ran["kernels"]), ran
    assert result.checks.get("reference_kernels"), "the judge lists the reference's kernels too"


def _rejected_on_the_device(result, source="in its timed graph"):
    assert result.status == Status.REJECTED, (result.status, result.error, result.checks.get("timing_trust"),
                                              result.checks.get("device_kernels"))
    assert "the device ran a" in result.error and source in result.error, result.error


def _honest_control(ev, problem=MATMUL):
    result = ev.evaluate(problem, "```python\n" + problem.solution_source + "```")
    assert result.status == Status.CORRECT, result.error


@pytest.mark.parametrize("static", [True, False], ids=["static_on", "static_off"])
def test_device_sees_torch_inside_the_captured_graph(gpu_eval, gpu_runtime_only, static):
    """Honest Triton for every checked call, cuBLAS only while the timer captures: no in-process recorder
    runs during the capture, so only the graph's kernels show it."""
    ev = gpu_eval if static else gpu_runtime_only
    code = HONEST_MATMUL + textwrap.dedent("""
        class ModelNew(Honest):
            def __init__(self, *args):
                super().__init__(*args)
                # cuBLAS makes its handle at the first matmul; inside a capture that fails, so warm it up
                # here, where no recorder runs (without this the H100 capture failed and timing went eager).
                warm = torch.ones(8, 8, device="cuda")
                torch.matmul(warm, warm)
            def forward(self, a, b):
                if torch.cuda.is_current_stream_capturing():   # only the timed graph
                    return torch.matmul(a, b)
                return super().forward(a, b)
        """)
    from kbencheval.eval.contract.device_kernels import kernel_class

    result = ev.evaluate(MATMUL, "```python\n" + code + "```")
    print("capture-only cuBLAS:", result.status, result.checks.get("timing_trust"), result.checks.get("device_kernels"))
    if result.status == Status.CORRECT:
        # Should the capture still fail, the timer falls back to eager calls, where the cuBLAS branch never
        # runs: then the cheat did not pay, and what was timed and profiled must be the Triton kernel alone.
        ran = result.checks["device_kernels"]
        assert "eager (cannot capture" in result.checks["timing_trust"], result.checks["timing_trust"]
        assert ran["source"] == "profiler" and all(kernel_class(k) is None for k in ran["kernels"]), ran
    else:
        _rejected_on_the_device(result)
        assert "cuBLAS" in result.error or "CUTLASS" in result.error, result.error
    _honest_control(ev)


def test_device_sees_an_op_rerouted_within_forward(gpu_runtime_only):
    """aten::clone (always allowed) rerouted to torch.mm and restored within each forward: the recorder sees
    a clone, the dispatcher looks unchanged after the call (the CPU suite's xfail). The device ran cuBLAS."""
    code = HONEST_MATMUL + TOUCH + textwrap.dedent("""
        import torch.library
        class ModelNew(Honest):
            def forward(self, a, b):
                lib = torch.library.Library("aten", "IMPL")
                lib.impl("clone", lambda t, memory_format=None: torch.mm(a, b), "CUDA")
                c = a.clone()
                del lib
                touch_kernel[(1,)](c, 0, BLOCK=16)
                return c
        """)
    _rejected_on_the_device(gpu_runtime_only.evaluate(MATMUL, "```python\n" + code + "```"))
    _honest_control(gpu_runtime_only)


def test_device_sees_compute_behind_a_paused_recorder(gpu_runtime_only):
    """The CPU suite's xfail (class 3): a generator frame reaches the recorder and pauses it, so torch compute
    passes the checked calls. The timed graph holds ATen's clamp kernel."""
    code = HEADER + textwrap.dedent("""
        class Box:
            pass
        def walk(box):
            yield box.gen.gi_frame.f_back
        class ModelNew(nn.Module):
            def forward(self, x):
                box = Box()
                box.gen = walk(box)
                frame = next(box.gen)
                capture = None
                while frame is not None:
                    capture = frame.f_locals.get("capture", capture)
                    frame = frame.f_back
                if capture is not None:
                    capture.paused += 1
                y = x.clamp(min=0)
                if capture is not None:
                    capture.paused -= 1
                relu_kernel[(1,)](x, y, 0, BLOCK=1024)
                return y
        """)
    result = gpu_runtime_only.evaluate(RELU, "```python\n" + code + "```")
    _rejected_on_the_device(result)
    assert "torch (ATen)" in result.error, result.error
    _honest_control(gpu_runtime_only, RELU)


def test_device_sees_library_kernels_after_n_eager_calls(gpu_eval):
    """Not capturable (a host sync), so timed eagerly; honest for the first 30 calls (10 correctness
    trials, the timer's setup: 2 capture attempts, 10 warm-ups, one untimed pass and one profiled call),
    cuBLAS after. Each round ends with one more profiled call, which counting cannot tell from a timed one."""
    code = HONEST_MATMUL + textwrap.dedent("""
        class ModelNew(Honest):
            def __init__(self):
                super().__init__()
                self.calls = 0
            def forward(self, a, b):
                self.calls += 1
                torch.cuda.synchronize()                     # not capturable: timed eagerly
                if self.calls > 30:
                    return torch.matmul(a, b)
                return super().forward(a, b)
        """)
    result = gpu_eval.evaluate(MATMUL, "```python\n" + code + "```")
    assert result.checks["timing_mechanism"].startswith("eager (cannot capture"), result.checks
    _rejected_on_the_device(result, source="in a profiled call")
    _honest_control(gpu_eval)


def test_device_helper_thread_with_torch_compute(gpu_runtime_only):
    """torch.matmul in a helper thread joined before forward returns, only while the timer captures. The
    audit hook denies the thread start (a candidate frame is on the stack), so the in-process tripwire
    rejects it first; the device kernels are the backstop where the hook is evaded."""
    code = HONEST_MATMUL + textwrap.dedent("""
        import threading
        class ModelNew(Honest):
            def forward(self, a, b):
                if not torch.cuda.is_current_stream_capturing():
                    return super().forward(a, b)
                box = []
                t = threading.Thread(target=lambda: box.append(torch.matmul(a, b)))
                t.start()
                t.join()
                return box[0]
        """)
    result = gpu_runtime_only.evaluate(MATMUL, "```python\n" + code + "```")
    assert result.status == Status.REJECTED, (result.status, result.error)
    assert "the device ran a" in result.error or "thread" in result.error, result.error
    _honest_control(gpu_runtime_only)


def test_device_torch_compile_kernels_are_not_the_candidates(gpu_runtime_only):
    """Inductor's Triton kernels carry Inductor's names (triton_poi_fused_...). Compiled on the timer's first
    call, the one call no recorder watches, then captured. Inductor may also trip the audit hook (a thread or
    a compile worker started under the candidate's frame, a thread count): either way, rejected; the reason is
    printed, and the diagnostic above checks Inductor's names without the sandbox."""
    code = HEADER + textwrap.dedent("""
        import torch._inductor.config
        from torch.utils._python_dispatch import _get_current_dispatch_mode
        torch._inductor.config.compile_threads = 1        # no compile-worker processes
        relu = torch.compile(lambda t: torch.relu(t))
        class ModelNew(nn.Module):
            def forward(self, x):
                if _get_current_dispatch_mode() is None:      # not a checked call: the timer's
                    return relu(x)
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """)
    result = gpu_runtime_only.evaluate(RELU, "```python\n" + code + "```")
    print("torch.compile attack:", result.status, result.error, result.checks.get("device_kernels"))
    assert result.status == Status.REJECTED, (result.status, result.error, result.checks.get("device_kernels"))
    _honest_control(gpu_runtime_only, RELU)
