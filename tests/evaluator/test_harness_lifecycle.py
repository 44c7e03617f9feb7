"""The harness's processes over their life. A harness that is killed outright (an eval actor hit by
ray.kill, a SIGKILLed kbench eval) leaves nothing behind: not its fork server, not its judge, not a
candidate that is busy looping. A new worker's socket takes only that worker; a worker whose warm-up
fails still starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support import ENV

HARNESS = """
import threading, time
from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
problem = load_bundled(1)[0]
ev = Evaluator(EvalConfig(device="cpu", sandbox="kernel", trials=1, timeout_s=600))
assert ev.evaluate(problem, "```python\\n" + problem.solution_source + "```").correct
looping = problem.solution_source.replace("        x = x.contiguous()", "        while True:\\n            pass")
threading.Thread(target=ev.evaluate, args=(problem, looping), daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


def _descendants(root: int) -> set[int]:
    """Live processes below `root` (the environment is allowlisted, so no marker reaches them)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.add(pid)
        except OSError:
            pass
    return out


def test_killed_harness_leaves_no_process_behind():
    proc = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(2)  # the looping candidate's worker is running by now
    started = _descendants(proc.pid)
    assert len(started) >= 3  # fork server, judge, looping worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 5
    while _alive(started) and time.time() < deadline:
        time.sleep(0.1)
    assert _alive(started) == set()


def test_a_workers_socket_accepts_only_the_process_forked_for_it(tmp_path):
    """launch.accept_from: a process that races a new worker to its socket does not take its place; the
    harness takes the connection whose peer the kernel names as the forked pid, and closes the others."""
    import socket

    from kbencheval.eval.processes.launch import accept_from

    path = str(tmp_path / "ctl.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    intruder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    intruder.connect(path)  # first in line, from this process
    worker = subprocess.Popen([sys.executable, "-c", "import socket, sys, time; s = socket.socket(socket.AF_UNIX); "
                               f"s.connect({path!r}); s.sendall(b'worker'); time.sleep(30)"])
    try:
        conn = accept_from(listener, {worker.pid}, time.monotonic() + 20)
        conn.settimeout(10)
        assert conn.recv(16) == b"worker"
        intruder.settimeout(5)
        assert intruder.recv(1) == b""  # turned away
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.connect(path)
        t0 = time.monotonic()
        try:
            accept_from(listener, {worker.pid}, t0 + 0.5)
        except TimeoutError:
            assert time.monotonic() - t0 < 5
        else:
            raise AssertionError("a connection from another process was taken")
    finally:
        worker.kill()
        worker.wait()
        listener.close()


def test_a_worker_whose_warm_up_fails_still_starts(monkeypatch, capsys):
    """worker.warm_run_time_checks is an optimisation: on a full device it says so and the worker goes on
    (its first trial then does the same work, and is judged as before)."""
    import torch

    from kbencheval.eval.untrusted import worker

    worker.warm_run_time_checks(torch.device("cpu"))  # the same calls a GPU worker makes, on CPU tensors
    assert capsys.readouterr().err == ""

    def full(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 32.00 MiB")

    monkeypatch.setattr(worker, "inputs_fingerprint", full)
    worker.warm_run_time_checks(torch.device("cpu"))
    assert "run-time checks not warmed: OutOfMemoryError" in capsys.readouterr().err


def test_the_evaluators_processes_start_cuda_with_one_hardware_queue(monkeypatch):
    """CUDA_DEVICE_MAX_CONNECTIONS=1 reaches the candidate's worker, whatever the harness's environment
    says: with eight queues per context, eight processes started and ended contexts two to three times
    slower on an H100 (benchmarks/context_churn.py)."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    problem = load_bundled(1)[0]
    checking = problem.solution_source.replace(
        "        x = x.contiguous()",
        "        import os\n        if os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') != '1':\n"
        "            raise RuntimeError(f\"queues: {os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}\")\n"
        "        x = x.contiguous()")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")  # restored afterwards, whatever it was
    with Evaluator(EvalConfig(device="cpu", trials=1, timing=False, static_checks=False, accept_cpu_tripwires_only=True,
                                timeout_s=120)) as ev:
        result = ev.evaluate(problem, "```python\n" + checking + "```")
    assert result.correct, result.error
