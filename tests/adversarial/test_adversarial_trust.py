"""Attacks by class (issue #17), each run with the static checks on AND off, each followed by an honest
control in the same Evaluator that must still come back `correct`.

Classes: 1 protocol forging, 2 compute the recorder does not see, 3 reaching harness state,
4 predictable or narrow inputs, 5 timing tricks (the trusted timing protocol runs under the
interpreter here with `timing_on_cpu`; GPU-only ones are in tests/evaluator/test_gpu_harness.py), 6 output
objects that compute when the harness reads them, 7 compiled code the CPU cannot attribute (issue #43).
An attack that only the static scan stops, and that the run-time side cannot close on the CPU, is an
`xfail(strict=True)` with the reason; docs/evaluator.md lists it. The fast tier runs one attack per
class; the rest are marked slow.

Threat table (docs/evaluator.md): "custom kernels did the work", "no tampering with harness objects",
"outputs are judged as forward returned them", "compiled extensions are held to what the CPU can attribute",
"inputs cannot be known in advance", "the candidate's time is not understated", "timed iterations
compute the answer".
"""

from __future__ import annotations

import textwrap

import pytest

from kbencheval.dataset import load_bundled, parse_problem
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval import Status
from kbencheval.eval.sharing.rounds import round_sizes
from tests.adversarial.test_adversarial import HEADER, RELU

ARGMAX = next(p for p in load_bundled(1) if p.problem_id == 10)
SOFTPLUS = parse_problem(textwrap.dedent('''
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    n = 4096
    SMALL_SIZES = {"n": 512}
    class Model(nn.Module):
        def forward(self, x):
            return F.softplus(x)
    def get_inputs():
        return [torch.randn(n)]
    def get_init_inputs():
        return []
    '''), name="Softplus")
SOFTPLUS_SOLUTION = HEADER + textwrap.dedent('''
    @triton.jit
    def softplus_kernel(x_ptr, y_ptr, n, LIMIT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        x = tl.minimum(tl.maximum(x, -LIMIT), LIMIT)
        y = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
        tl.store(y_ptr + offs, y, mask=mask)

    class ModelNew(nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            softplus_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), LIMIT=LIMIT_VALUE, BLOCK=1024)
            return y
    ''')

# Writes a forged message to every open descriptor (one of them is the worker's socket): os.write
# raises no audit event, so this reaches the harness even with the audit hook on.
FORGE = '''
import os
def forge(line):
    for fd in range(3, 64):
        if fd > 2:
            try:
                os.write(fd, line)
            except OSError:
                pass
'''

# name -> (class, problem, code, verdicts with static checks on, verdicts with them off, xfail reason when off)
ATTACKS = {
    "forged_ready_and_empty_outputs": (1, RELU, FORGE + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        forge(b'{"type": "ready", "checks": {}}\\n{"type": "outputs", "phase": "trials", "items": [], "checks": {}}\\n')
    def forward(self, x):
        return torch.zeros_like(x)
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "forged_failure_claiming_correct": (1, RELU, FORGE + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        forge(b'{"type": "failure", "status": "correct", "error": "", "trial": "", "checks": {}}\\n')
    def forward(self, x):
        return torch.zeros_like(x)
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "forged_outputs_for_made_up_trials": (1, RELU, FORGE + '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch_relu(x, y)
        item = '{"trial": {"seed": 1, "stress": ""}, "desc": {"kind": "file", "path": "x.pt"}}'
        forge(('{"type": "outputs", "phase": "trials", "items": [' + item + '], "checks": {}}\\n').encode())
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "grid_function_computes": (2, RELU, '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        def grid(meta):
            y.copy_(x.clamp(min=0))          # torch compute inside the launch
            return (1,)
        relu_kernel[grid](x, y, 0, BLOCK=1024)  # n=0: the kernel writes nothing
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "pre_run_hook_computes": (2, RELU, '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel.add_pre_run_hook(lambda *args, **kwargs: y.copy_(x.clamp(min=0)))
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "library_reroutes_clone": (2, RELU, '''
import torch.library
LIB = torch.library.Library("aten", "IMPL")
def fake_clone(x, memory_format=None):
    return x.clamp(min=0)
LIB.impl("clone", fake_clone, "CPU")
class ModelNew(nn.Module):
    def forward(self, x):
        y = x.clone()                         # "allowed" op, now relu
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED, Status.RUNTIME_ERROR}, ""),
    "library_reroute_within_forward": (2, RELU, '''
import torch.library
class ModelNew(nn.Module):
    def forward(self, x):
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("clone", lambda t, memory_format=None: t.clamp(min=0), "CPU")
        y = x.clone()                         # "allowed" op, now relu, run beneath the recorder's view
        del lib                               # gone before the dispatcher is compared
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED},
        "static checks off: an op rerouted and restored within one forward passes every in-process check; "
        "on a GPU the device's kernels show it "
        "(tests/evaluator/test_gpu_device_kernels.py::test_device_sees_an_op_rerouted_within_forward)"),
    "joined_helper_thread": (2, RELU, '''
import threading
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        t = threading.Thread(target=lambda: y.copy_(x.clamp(min=0)))   # modes are thread-local
        t.start()
        t.join()                                                        # thread count looks unchanged
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "generator_frame_pauses_recorder": (3, RELU, '''
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
        capture.paused += 1                   # the recorder stops seeing torch ops
        y = x.clamp(min=0)
        capture.paused -= 1
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED},
        "static checks off + a generator frame: the CPU recorder lives in the candidate's process and no audit "
        "event fires for frame access; on a GPU the device's kernels show it "
        "(tests/evaluator/test_gpu_device_kernels.py::test_device_sees_compute_behind_a_paused_recorder)"),
    "getframe_reaches_worker": (3, RELU, '''
import sys
class ModelNew(nn.Module):
    def forward(self, x):
        frame = sys._getframe(1)
        y = x.clamp(min=0)
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "import_alias_rebinds_worker": (3, RELU, '''
import kbencheval.eval.untrusted.tripwires as tw
tw.OpCapture.__torch_dispatch__ = lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {}))
class ModelNew(nn.Module):
    def forward(self, x):
        y = x.clamp(min=0)
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "memo_of_fixed_seed_inputs": (4, RELU, '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.answers = []
        for seed in range(1000, 1005):        # the seeds the harness used to fix per configuration
            torch.manual_seed(seed)
            self.answers.append(torch.randn(RELU_SHAPE).clamp(min=0))
        self.calls = 0
    def forward(self, x):
        y = torch.empty_like(x)
        src = self.answers[self.calls % 5]
        self.calls += 1
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](src, y, x.numel(), BLOCK=1024)
        return y
@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
''', {Status.REJECTED}, {Status.INCORRECT}, ""),
    "softplus_right_only_near_zero": (4, SOFTPLUS, SOFTPLUS_SOLUTION.replace("LIMIT_VALUE", "6.0"),
                                      {Status.INCORRECT}, {Status.INCORRECT}, ""),
    "argmax_off_by_one": (4, ARGMAX, ARGMAX.solution_source.replace(
        "tl.min(candidates, axis=0).to(tl.int64)", "(tl.min(candidates, axis=0) + 1).to(tl.int64)"),
        {Status.INCORRECT}, {Status.INCORRECT}, ""),
    "forged_timing_figures": (5, RELU, FORGE + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        y = torch.empty_like(x)
        for _ in range(20):                   # slow on purpose, then claims a nanosecond per call
            launch_relu(x, y)
        if self.calls > 8:
            forge(b'{"type": "outputs", "phase": "time_round", "items": [], "checks": {}, '
                  b'"timing": {"new_us": [0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001]}}\\n')
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "wrong_only_when_timed": (5, RELU, '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        y = torch.empty_like(x)
        if self.calls <= 8:                   # the correctness trials (2 + 5 stress) and one warmup call
            launch_relu(x, y)
        else:                                 # the timed calls: a cheap kernel that is wrong
            relu_kernel[(1,)](x, y, 1, BLOCK=1024)
        return y
''', {Status.INCORRECT}, {Status.INCORRECT}, ""),
    # Both pass the static allow-list: a class named Lazy, a method named detach, type() with a string key.
    "parameter_subclass_computes_when_exported": (6, RELU, '''
class Lazy(nn.Parameter):
    def detach(self):                         # the worker's export called it, after every check
        return self.source.clamp(min=0)
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)   # writes nothing, but y counts as a kernel's output
        out = Lazy(y, requires_grad=False)    # an nn.Parameter passed the Tensor-subclass check
        out.source = x
        return out
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    "list_subclass_computes_when_iterated": (6, RELU, '''
def lazy_iter(self):                          # runs when the worker lists the outputs, after the recorder
    self.y.copy_(self.x.clamp(min=0))
    yield self.y
Outputs = type("Outputs", (list,), {"__iter__": lazy_iter})
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)
        out = Outputs()
        out.x, out.y = x, y
        return out
''', {Status.REJECTED}, {Status.REJECTED}, ""),
    # The static allow-list refuses ctypes and subprocess; with it off, C built by the compile toolchain.
    "c_library_computes_below_the_dispatcher": (7, RELU, '''
import ctypes
import os
import subprocess
folder = os.environ["TORCH_EXTENSIONS_DIR"]
with open(os.path.join(folder, "relu.c"), "w") as f:
    f.write("void relu(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; }")
subprocess.run(["cc", "-shared", "-fPIC", "-O1", os.path.join(folder, "relu.c"), "-o", os.path.join(folder, "relu.so")],
               check=True)
LIB = ctypes.CDLL(os.path.join(folder, "relu.so"))
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(1,)](x, y, 0, BLOCK=1024)   # the decoy launch: y counts as a kernel's output
        LIB.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
''', {Status.REJECTED}, {Status.REJECTED}, ""),
}
FAST = {"forged_ready_and_empty_outputs", "grid_function_computes", "getframe_reaches_worker",
        "softplus_right_only_near_zero", "forged_timing_figures", "parameter_subclass_computes_when_exported",
        "list_subclass_computes_when_iterated", "c_library_computes_below_the_dispatcher"}
HONEST = {RELU.key: RELU.solution_source, SOFTPLUS.key: SOFTPLUS_SOLUTION.replace("LIMIT_VALUE", "1e30"),
          ARGMAX.key: ARGMAX.solution_source}


@pytest.fixture(scope="module")
def evaluators():
    # The trusted timing protocol runs under the interpreter too (its numbers mean nothing there).
    cfg = dict(device="cpu", timeout_s=60, memory_limit_gb=4, trials=2, timing_on_cpu=True, iters=20, warmup=1)
    runtime_only_cfg = EvalConfig(**cfg, static_checks=False, accept_cpu_tripwires_only=True)
    with Evaluator(EvalConfig(**cfg)) as strict, Evaluator(runtime_only_cfg) as runtime_only:
        yield {True: strict, False: runtime_only}


@pytest.fixture(scope="module")
def untimed_evaluators():
    """The CPU's own configuration (nothing timed there): a verdict rests on the correctness trials alone."""
    cfg = dict(device="cpu", timeout_s=60, memory_limit_gb=4, trials=2)
    runtime_only_cfg = EvalConfig(**cfg, static_checks=False, accept_cpu_tripwires_only=True)
    with Evaluator(EvalConfig(**cfg)) as strict, Evaluator(runtime_only_cfg) as runtime_only:
        yield {True: strict, False: runtime_only}


def _params():
    for name in sorted(ATTACKS):
        cls, _, _, _, _, hole = ATTACKS[name]
        for static in (True, False):
            marks = [] if name in FAST else [pytest.mark.slow]
            if hole and not static:
                marks.append(pytest.mark.xfail(strict=True, reason=hole))
            yield pytest.param(name, static, marks=marks, id=f"class{cls}-{name}-static_{'on' if static else 'off'}")


@pytest.mark.parametrize(("name", "static"), list(_params()))
def test_attack_then_honest_control(evaluators, untimed_evaluators, name, static):
    cls, problem, code, on, off, _ = ATTACKS[name]
    code = code.replace("RELU_SHAPE", repr(tuple(problem.small_sizes.values())))
    if "import triton" not in code:
        code = HEADER + code
    ev = evaluators[static]
    # Classes 6 and 7 end in the correctness trials: also as the CPU runs by default, with nothing timed.
    for judge in ([untimed_evaluators[static]] if cls >= 6 else []) + [ev]:
        result = judge.evaluate(problem, "```python\n" + code + "\n```")
        assert result.status in (on if static else off), (name, result.status, result.error)
        assert not result.correct
    honest = ev.evaluate(problem, "```python\n" + HONEST[problem.key] + "\n```")
    assert honest.status == Status.CORRECT, (problem.key, honest.error)
    assert honest.checks["timing_path"] == "eager"  # the interpreter: no graph to capture
    rounds = honest.checks["timing_rounds"]  # iters=20: two judged timed outputs per round
    assert len(honest.checks["correctness_timed_outputs"]) == 2 * len(rounds) == 2 * len(round_sizes(20))


# Class 7 with the static checks on: backend=cuda allows load_inline, and its C++ calls torch's CPU kernel
# directly (at::cpu::, no dispatcher), so no recorder sees library compute; the decoy-free output is the
# extension's. On a GPU the device's kernels tell; on the CPU such a verdict is refused.
LIBRARY_EXTENSION = """
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = '''
#include <torch/extension.h>
#include <ATen/CPUFunctions.h>
torch::Tensor relu_out(torch::Tensor x) {
    return at::cpu::clamp_min(x, 0);
}
'''
ext = load_inline(name="tf_library_relu", cpp_sources=source, functions=["relu_out"], verbose=False)

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_out(x)
"""


@pytest.mark.slow  # compiles a C++ extension twice: minutes on a 2-core CPU
@pytest.mark.parametrize("static", [True, False], ids=["static_on", "static_off"])
def test_compiled_extension_is_not_correct_on_the_cpu(static):
    cfg = EvalConfig(device="cpu", backend="cuda", timeout_s=600, memory_limit_gb=4, trials=1, stress_trials=False,
                     static_checks=static, accept_cpu_tripwires_only=not static)
    with Evaluator(cfg) as ev:
        result = ev.evaluate(RELU, "```python\n" + LIBRARY_EXTENSION + "\n```")
    assert result.status == Status.REJECTED, (result.status, result.error)
    assert "cannot be attributed" in result.error and "device=cuda" in result.error
