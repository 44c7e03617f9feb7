"""A candidate's Triton compile happens with the device gate let go: a timer elsewhere does not wait
for seconds of CPU work, and the worker launches nothing until the harness has the gate again."""

from __future__ import annotations

import queue
import threading
import time
import types

import pytest
import torch

from kbencheval.eval.sharing.gate import DeviceGate
from kbencheval.eval.contract.protocol import (Compiled, Compiling, Failure, Outputs, ProtocolError, Resume, RunPhase, Status,
                                      Trial)
from kbencheval.eval.trusted.session import Session, Verdict


class ScriptedWorker:
    """The harness's side of a socket: `recv` returns what the test queues, `send` records."""

    def __init__(self):
        self.inbox: queue.Queue = queue.Queue()
        self.sent: list = []

    def recv(self):
        return self.inbox.get(timeout=30)

    def send(self, msg) -> None:
        self.sent.append(msg)


def _session(conn) -> Session:
    session = Session.__new__(Session)
    session.checks, session.spent, session.requested = {}, {}, []
    session.conn, session.compiled, session.watchdog = conn, True, None
    session.handles = types.SimpleNamespace(cfg=types.SimpleNamespace(on_cpu=False))  # a GPU session: no memory-map check
    return session


def test_a_timer_gets_the_device_while_a_trial_compiles_and_the_trial_waits_for_it(tmp_path):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    worker, session = ScriptedWorker(), _session(None)
    session.conn = worker
    trials, timing = {}, {}
    timer_in, timer_done = threading.Event(), threading.Event()

    def timer():  # waits for the device until the trial steps aside
        with gate.exclusive(timing):
            timer_in.set()
            time.sleep(0.3)
        timer_done.set()

    def worker_side():  # compiles until the timer holds the device; answers once it is done
        assert timer_in.wait(10)
        worker.inbox.put(Compiled())
        assert timer_done.wait(10)
        worker.inbox.put(Outputs(phase="trials", items=[]))

    with gate.shared(trials) as hold:
        worker.inbox.put(Compiling())
        threading.Thread(target=timer).start()
        threading.Thread(target=worker_side).start()
        reply = session.ask(RunPhase(phase="trials", trials=[Trial(seed=1)]), hold)
        resumed_at = time.monotonic()
    assert isinstance(reply, Outputs)
    assert [type(m) for m in worker.sent] == [RunPhase, Resume]
    first, second = trials["holds"]
    assert first[1] <= timing["start"] and timing["end"] <= second[0] <= resumed_at  # the timer ran in between
    assert session.checks["compiles_aside"]["count"] == session.checks["compiles_aside"]["device_let_go"] == 1
    assert session.checks["compiles_aside"]["seconds"] >= 0.25  # let go until the timer was done


def test_without_a_hold_the_compile_keeps_the_device():
    """The exclusive timing passes no hold: a compile there is answered, and nothing is let go."""
    worker = ScriptedWorker()
    session = _session(worker)
    for msg in (Compiling(), Compiled(), Outputs(phase="time_round", items=[])):
        worker.inbox.put(msg)
    session.ask(RunPhase(phase="time_round", trials=[]))
    assert [type(m) for m in worker.sent] == [RunPhase, Resume]
    assert session.checks["compiles_aside"]["device_let_go"] == 0


@pytest.mark.parametrize("script, error", [
    ([Compiled()], "expected Outputs or Compiling for phase trials, got compiled"),
    ([Compiling(), Outputs(phase="trials", items=[])], "expected Compiled, got outputs"),
    ([Compiling(), Compiling()], "expected Compiled, got compiling"),
])
def test_compile_messages_out_of_turn_are_protocol_abuse(tmp_path, script, error):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    worker = ScriptedWorker()
    session = _session(worker)
    for msg in script:
        worker.inbox.put(msg)
    with gate.shared({}) as hold:
        with pytest.raises(ProtocolError, match=error):
            session.ask(RunPhase(phase="trials", trials=[Trial(seed=1)]), hold)
        assert hold.fds is None or script == [Compiled()]  # a hold abandoned mid-compile is let go


def test_a_compile_that_fails_ends_with_the_workers_failure_and_the_device_let_go(tmp_path):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    worker = ScriptedWorker()
    session = _session(worker)
    worker.inbox.put(Compiling())
    worker.inbox.put(Failure(status=Status.COMPILE_ERROR, error="triton.CompilationError: at 3:4"))
    with gate.shared({}) as hold:
        with pytest.raises(Verdict) as verdict:
            session.ask(RunPhase(phase="trials", trials=[Trial(seed=1)]), hold)
        assert hold.fds is None  # not taken again for a candidate that is finished
    assert verdict.value.result.status == Status.COMPILE_ERROR


class RecordingChannel:
    def __init__(self, replies=()):
        self.sent, self.replies = [], list(replies)

    def send(self, msg) -> None:
        self.sent.append(type(msg).__name__)

    def recv(self):
        return self.replies.pop(0) if self.replies else Resume()


def test_the_worker_tells_the_harness_around_each_compile_and_waits_to_resume():
    from kbencheval.eval.sharing.compile_aside import CompileAside

    chan = RecordingChannel()
    aside = CompileAside(chan, torch.device("cpu"))
    with aside.window():  # importing the candidate, before Ready: no phase, no messages
        pass
    assert chan.sent == []
    aside.in_phase = True
    with aside.window():
        with aside.window():  # a compile inside a compile (autotuner, nested jit) is one window
            chan.sent.append("body")
    assert chan.sent == ["Compiling", "body", "Compiled"]
    with pytest.raises(ValueError, match="bad kernel"), aside.window():
        raise ValueError("bad kernel")
    assert chan.sent[-2:] == ["Compiling", "Compiled"]  # a failed compile still hands the device back
    chan.replies = [Outputs(phase="trials", items=[])]
    with pytest.raises(ProtocolError, match="expected resume"), aside.window():
        pass


def test_the_worker_wraps_tritons_compile_step(monkeypatch):
    """Triton 3.x compiles in JITFunction._do_compile; the wrapped step runs inside the window."""
    from triton.runtime.jit import JITFunction

    from kbencheval.eval.sharing.compile_aside import CompileAside

    chan = RecordingChannel()
    monkeypatch.setattr(JITFunction, "_do_compile",
                        lambda fn, key, *rest, **kw: (chan.sent.append(f"compile {key}"), "kernel")[1])
    aside = CompileAside(chan, torch.device("cpu"))
    aside.install()
    aside.in_phase = True
    assert JITFunction._do_compile(types.SimpleNamespace(), "k1", {}, 0, {}, None, {}, False) == "kernel"
    assert chan.sent == ["Compiling", "compile k1", "Compiled"]
