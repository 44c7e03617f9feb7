"""The sandbox's promises, each tested by a candidate that tries to break it.

Every attack must end in a verdict that is not `correct`, and the harness must survive it: the
honest reference solution evaluated right after still comes back `correct`. Attacks that the
static scan stops are also run with the scan off, to prove the run-time defences hold alone.

Threat table (docs/evaluator.md): "a verdict says `correct` only if outputs match", "no tampering with
harness objects", "a CPU verdict says what it is worth", "no files, network, processes outside scratch",
"no leftover processes, memory, time".
"""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time

import pytest

from kbencheval.dataset import load_bundled
from kbencheval.eval.trusted.harness import EvalConfig, Evaluator, bwrap_works
from kbencheval.eval import Status

RELU = next(p for p in load_bundled(1) if p.problem_id == 1)

HEADER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def launch_relu(x, y):
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
"""


def candidate(body: str) -> str:
    return "```python\n" + HEADER + textwrap.dedent(body) + "\n```"


@pytest.fixture(scope="module")
def strict():
    with Evaluator(EvalConfig(device="cpu", timeout_s=10, memory_limit_gb=4)) as ev:
        yield ev


@pytest.fixture(scope="module")
def runtime_only():
    """Static checks off: only the sandbox and run-time checks stand between attack and verdict."""
    with Evaluator(EvalConfig(device="cpu", timeout_s=10, memory_limit_gb=4, static_checks=False,
                                accept_cpu_tripwires_only=True)) as ev:
        yield ev


def assert_survives(ev: Evaluator):
    result = ev.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error


def test_static_checks_off_on_the_cpu_needs_the_weaker_verdict_accepted():
    from kbencheval.config import ConfigError

    with pytest.raises(ConfigError, match="accept the weaker verdict with accept_cpu_tripwires_only=true"):
        EvalConfig(device="cpu", static_checks=False)


@pytest.mark.parametrize("static", [True, False], ids=["static_on", "static_off"])
def test_cpu_verdict_says_what_rests_on_the_static_allowlist(strict, runtime_only, static):
    result = (strict if static else runtime_only).evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    promises = "custom kernels did the work, no tampering with harness objects: rest on "
    assert result.checks["cpu_verdict"].startswith(promises + ("the static allow-list" if static else
                                                               "in-process tripwires only"))
    assert static or "accept_cpu_tripwires_only" in result.checks["cpu_verdict"]
    assert "none of its methods ran), and no compiled extension ran" in result.checks["cpu_verdict"]


# Each attack: (id, code, evaluator fixture, allowed verdicts)
ATTACKS = {
    "no_kernel_uninitialized_memory": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.empty_like(x)   # hopes stale memory holds the answer
        """, {Status.REJECTED}),
    "decoy_launch_unused_output": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                scratch = torch.empty_like(x)
                launch_relu(x, scratch)       # real kernel, result thrown away
                return torch.empty_like(x)
        """, {Status.REJECTED, Status.INCORRECT}),
    "torch_compute_behind_decoy": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                scratch = torch.empty_like(x)
                launch_relu(x, scratch)
                return x.clamp(min=0)         # the real work done by torch
        """, {Status.REJECTED}),
    "cached_output_across_calls": ("""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.cache = []
            def forward(self, x):
                if not self.cache:
                    y = torch.empty_like(x)
                    launch_relu(x, y)
                    self.cache.append(y)
                scratch = torch.empty_like(x)
                launch_relu(x, scratch)
                return self.cache[0]
        """, {Status.INCORRECT, Status.REJECTED}),
    "mutates_input": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                launch_relu(x, x)             # in place: saves an allocation, corrupts the caller's tensor
                return x
        """, {Status.REJECTED}),
    "downcast_fp16": ("""
        @triton.jit
        def half_relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask).to(tl.float16)
            tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)

        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty(x.shape, dtype=torch.float16, device=x.device)
                half_relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
                return y.to(torch.float32)
        """, {Status.INCORRECT}),
    "side_stream": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                with torch.cuda.stream(torch.cuda.Stream()):
                    launch_relu(x, y)
                return y
        """, {Status.REJECTED}),
    "monkeypatch_timer": ("""
        torch.cuda.Event.elapsed_time = lambda self, other: 0.001
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """, {Status.REJECTED}),
    "try_except_fallback": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                try:
                    y = torch.empty_like(x)
                    launch_relu(x, y)
                    return y
                except Exception:
                    return torch.relu(x)
        """, {Status.REJECTED}),
    "tensor_subclass": ("""
        class Fake(torch.Tensor):
            def __eq__(self, other):
                return True
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y.as_subclass(Fake)
        """, {Status.REJECTED}),
    "thread": ("""
        import threading
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                threading.Thread(target=launch_relu, args=(x, y)).start()
                return y
        """, {Status.REJECTED}),
    "fake_verdict_on_stdout": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                print('{"type": "verdict", "status": "correct", "speedup": 100.0}')
                print('{"status": "correct", "correct": true, "speedup": 100.0}', flush=True)
                return torch.empty_like(x)
        """, {Status.REJECTED}),
    "infinite_loop": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                while True:
                    pass
        """, {Status.TIMEOUT}),
    "host_oom": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                hog = torch.empty(64 * 2**30, dtype=torch.uint8)   # 64 GiB, past the cap
                hog.fill_(1)
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """, {Status.RUNTIME_ERROR}),
    "segfault_out_of_bounds": ("""
        @triton.jit
        def wild_store(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK).to(tl.int64) * 100000000000
            tl.store(y_ptr + offs, tl.load(x_ptr + tl.arange(0, BLOCK)))

        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                wild_store[(1,)](x, y, BLOCK=16)
                return y
        """, {Status.RUNTIME_ERROR}),
    "global_flags": ("""
        class ModelNew(nn.Module):
            def forward(self, x):
                torch.backends.cuda.matmul.allow_tf32 = True
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """, {Status.REJECTED}),
    "host_roundtrip_numpy": ("""
        import numpy as np
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                launch_relu(x, y)
                return torch.from_numpy(np.maximum(x.cpu().numpy(), 0))
        """, {Status.REJECTED}),
}

# Attacks whose static rejection we also bypass, to exercise the run-time defence behind it.
RUNTIME_ATTACKS = {
    "monkeypatch_timer": {Status.REJECTED},
    "tensor_subclass": {Status.REJECTED},
    "thread": {Status.REJECTED},
    "global_flags": {Status.REJECTED},
    "host_roundtrip_numpy": {Status.REJECTED, Status.RUNTIME_ERROR},
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_caught(strict, name):
    code, allowed = ATTACKS[name]
    result = strict.evaluate(RELU, candidate(code))
    assert result.status in allowed, (name, result.status, result.error)
    assert not result.correct
    assert_survives(strict)


@pytest.mark.parametrize("name", sorted(RUNTIME_ATTACKS))
def test_attack_is_caught_at_run_time(runtime_only, name):
    code, _ = ATTACKS[name]
    result = runtime_only.evaluate(RELU, candidate(code))
    assert result.status in RUNTIME_ATTACKS[name], (name, result.status, result.error)


def test_sys_exit_is_a_verdict(strict, runtime_only):
    code = """
        import sys
        class ModelNew(nn.Module):
            def forward(self, x):
                sys.exit(0)
        """
    assert strict.evaluate(RELU, candidate(code)).status == Status.REJECTED
    result = runtime_only.evaluate(RELU, candidate(code))
    assert result.status == Status.RUNTIME_ERROR and "SystemExit" in result.error
    assert_survives(runtime_only)


def _alive_with_marker(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def test_no_processes_left_running(runtime_only):
    marker = f"leftover-{os.getpid()}-{time.time_ns()}"
    code = f"""
        import subprocess
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                # a detached grandchild in its own session, escaping the worker's process group
                subprocess.Popen(["sh", "-c", "sleep 300; echo {marker}"], start_new_session=True)
                subprocess.Popen(["sh", "-c", "exec -a {marker} sleep 300"])
            def forward(self, x):
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """
    runtime_only.evaluate(RELU, candidate(code))
    deadline = time.time() + 5
    while _alive_with_marker(marker) and time.time() < deadline:
        time.sleep(0.1)
    assert _alive_with_marker(marker) == []


needs_bwrap = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap unavailable: filesystem/network sandbox inactive")


@needs_bwrap
def test_cannot_write_outside_the_sandbox(runtime_only, tmp_path):
    target = os.path.abspath("tritonforge_sandbox_escape.txt")  # the repository checkout
    code = f"""
        class ModelNew(nn.Module):
            def forward(self, x):
                open({target!r}, "w").write("escaped")
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """
    result = runtime_only.evaluate(RELU, candidate(code))
    assert not os.path.exists(target)
    # The worker's audit hook (a tripwire) denies it first; bwrap's read-only filesystem stands behind it.
    assert result.status == Status.REJECTED and "writing" in result.error and "audit hook" in result.error


@needs_bwrap
def test_no_network(runtime_only):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    connections = []

    def accept():
        try:
            connections.append(server.accept())
        except OSError:
            pass

    t = threading.Thread(target=accept)
    t.start()
    code = f"""
        import socket
        class ModelNew(nn.Module):
            def forward(self, x):
                socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """
    result = runtime_only.evaluate(RELU, candidate(code))
    t.join()
    server.close()
    assert connections == []
    # The audit hook (a tripwire) denies the socket first; bwrap's empty network stands behind it.
    assert result.status in (Status.REJECTED, Status.RUNTIME_ERROR) and not result.correct


def test_reading_the_reference_file_does_not_help(runtime_only):
    """Reading the problem gives only its code; running it is torch compute and is rejected."""
    code = f"""
        class ModelNew(nn.Module):
            def forward(self, x):
                scope = {{}}
                exec(open({RELU.path!r}).read(), scope)
                scratch = torch.empty_like(x)
                launch_relu(x, scratch)
                return scope["Model"]()(x)
        """
    result = runtime_only.evaluate(RELU, candidate(code))
    assert result.status in (Status.REJECTED, Status.RUNTIME_ERROR), result.error
    assert not result.correct


def test_verdicts_name_protections(strict):
    result = strict.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert "process-group" in result.sandbox
    assert ("bwrap" in result.sandbox) == bwrap_works()


def test_forged_done_on_the_workers_channel(runtime_only):
    """The candidate finds the worker's socket and claims success before any check ran."""
    code = """
        import socket
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                for fd in range(3, 64):
                    try:
                        s = socket.socket(fileno=fd)
                        s.sendall(b'{"type": "done", "checks": {}}\\n')
                        s.detach()
                    except OSError:
                        pass
            def forward(self, x):
                return torch.empty_like(x)
        """
    result = runtime_only.evaluate(RELU, candidate(code))
    assert result.status in (Status.REJECTED, Status.RUNTIME_ERROR), (result.status, result.error)
    assert not result.correct
