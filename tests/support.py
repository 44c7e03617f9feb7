"""Shared test helpers: the tiny model, a real `kbench serve` subprocess, and another Evaluator's device use."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def build_tiny_model(out_dir: Path, **sizes) -> str:
    """scripts/make_tiny_model.py's random Qwen3; sizes: vocab_size, hidden, layers (its defaults: tiny)."""
    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "scripts" / "make_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.build(out_dir, **sizes))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, url: str, proc: subprocess.Popen | None = None):
        self.url, self.log = url, ""  # log: the server's output, filled in once it has stopped
        self.proc = proc  # the server process (tests kill it to play a crashed server)

    def requests_served(self) -> int:
        """POST /generate calls this server has answered (its /health counter)."""
        return requests.get(f"{self.url}/health", timeout=5).json()["generate_requests"]


@contextlib.contextmanager
def kbench_server(model: str, timeout_s: float = 120, device: str = "cpu", visible_gpus: str | None = None):
    """`kbench serve` on 127.0.0.1, up once /health answers; stopped (and its output kept) on exit.
    visible_gpus: CUDA_VISIBLE_DEVICES for the server; pass a Ray GPU actor's own value and `device=cuda`
    is that actor's physical GPU (outside Ray the server would otherwise see every GPU, cuda = the first)."""
    port = free_port()
    env = ENV if visible_gpus is None else {**ENV, "CUDA_VISIBLE_DEVICES": visible_gpus}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbencheval.cli", "serve", "--model", model, "--port", str(port), "--threads", "1",
         "--device", device], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    served = Served(f"http://127.0.0.1:{port}", proc)
    deadline = time.time() + timeout_s
    try:
        while True:
            try:
                if requests.get(f"{served.url}/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"kbench serve did not come up:\n{proc.communicate()[0][-3000:]}")
            time.sleep(0.2)
        yield served
    finally:
        proc.terminate()
        try:
            served.log = proc.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            served.log = proc.communicate()[0]


@contextlib.contextmanager
def another_reservation(gate, nbytes: int, capacity: int, seconds: float):
    """Another Evaluator's candidate, holding `nbytes` of `gate`'s device memory for `seconds` from a
    thread; yields a list that gets the monotonic time it let go."""
    released, taken = [], threading.Event()

    def hold() -> None:
        with gate.reserve(nbytes, capacity):
            taken.set()
            time.sleep(seconds)
            released.append(time.monotonic())

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    try:
        yield released
    finally:
        thread.join(30)


def out_of_memory_once(real_call, kind: type, calls: list):
    """An Evaluator's judge call that answers its first `kind` request as a full device does; `calls`
    gets the monotonic time of each `kind` request."""

    from kbencheval.eval.contract.judge_replies import REPLIES

    def judge_call(msg):
        if isinstance(msg, kind):
            calls.append(time.monotonic())
            if len(calls) == 1:
                return REPLIES[kind](ok=False, error="OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB")
        return real_call(msg)

    return judge_call


def record_requests(monkeypatch, ev) -> tuple[list, list]:
    """Records, in turn, what `ev`'s sessions ask the worker and the judge: (order, compares). `order`:
    ("worker" or "judge", phase, trials) per request, the judge's timer setups as phase "timing_setup";
    `compares`: the judge's Compare messages."""
    from kbencheval.eval.contract.protocol import Compare, TimeReference
    from kbencheval.eval.trusted.session import Session

    order, compares, request, call = [], [], Session.request, ev.judge_call
    monkeypatch.setattr(Session, "request", lambda self, msg: (order.append(("worker", msg.phase, msg.trials)),
                                                               request(self, msg))[1])

    def judge_call(msg):
        if isinstance(msg, Compare):
            compares.append(msg)
            order.append(("judge", msg.phase, [item.trial for item in msg.items]))
        if isinstance(msg, TimeReference) and msg.setup:
            order.append(("judge", "timing_setup", []))
        return call(msg)
    ev.judge_call = judge_call
    return order, compares
