"""The harness's side of a candidate's worker process: forked before its candidate is known, told it later.

A worker's start (fork, CUDA context, imports, the tripwires' hooks) takes seconds on a busy GPU, and
it needs nothing of the candidate. So each Evaluator forks the next candidate's worker as soon as a
candidate is over (`Worker`, the spare): its start runs while the next candidate is checked, prepared
by the judge and waits for device memory, and the candidate's job (`protocol.Assign`) goes to a worker
that is already up. A spare is forked only after the previous worker and everything it left were
killed (the fork server's sweep), so no earlier candidate's process is alive beside it in its PID
namespace (the judge's) to stall, signal or read it.
"""

from __future__ import annotations

import dataclasses
import select
import shutil
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbencheval.eval.contract.protocol import Assign, CandidateJob, decode, encode
from kbencheval.eval.processes.server import HarnessError
from kbencheval.eval.processes.lifecycle import kill_group, wait_gone


@dataclasses.dataclass(frozen=True)
class ForkClient:
    """What a worker's launch needs of its Evaluator, and nothing else: where job folders go, the settings a
    worker starts with, and the fork server's spawn and sweep (the Evaluator's processes hold the rest)."""

    scratch: str
    cfg: Any  # the Evaluator's EvalConfig
    spawn: Callable[[dict, float], tuple]  # (job shell, deadline) -> (pid, Conn)
    next_job: Callable[[], int]  # the next job folder's number
    sweep: Callable[[], None]  # kill whatever a finished worker left, the judge excepted


def accept_from(listener: socket.socket, pids: set[int], until: float) -> socket.socket:
    """The first connection to `listener` made by one of `pids` (the process just forked), as the kernel
    recorded the peer at connect (SO_PEERCRED); others are closed. No candidate's process should be alive
    when a worker is forked (above), but a worker's socket sits in a folder any process of the Evaluator
    can read, so one that were alive could otherwise take the new worker's place. TimeoutError at `until`."""
    while True:
        listener.settimeout(max(0.001, until - time.monotonic()))
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            raise TimeoutError from None
        peer, _uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
        if peer in pids:
            return conn
        conn.close()
        if time.monotonic() >= until:
            raise TimeoutError


class Conn:
    """A child's socket with a shared deadline; messages are protocol dataclasses (judge replies: dicts)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline, self.buf = sock, deadline, b""

    def recv_line(self) -> bytes | None:
        while b"\n" not in self.buf:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                raise TimeoutError from None
            except ConnectionError:  # the peer died mid-message
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def recv(self):
        """The worker's next message, decoded (ProtocolError if malformed), or None if it closed."""
        line = self.recv_line()
        return None if line is None else decode(line)

    def send(self, msg) -> None:
        self.sock.sendall(encode(msg))

    def closed_by_peer(self) -> bool:
        """Whether the process at the other end is gone (it sends nothing before its job)."""
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


class Worker:
    """A forked worker process in its own job folder, connected and waiting for its candidate."""

    def __init__(self, forks: ForkClient):
        self.job_dir = tempfile.mkdtemp(prefix=f"job{forks.next_job()}-", dir=forks.scratch)
        self.forked = time.monotonic()
        cfg = forks.cfg
        shell = {"kind": "candidate", "job_dir": self.job_dir, "device": cfg.device_index,
                 "memory_limit_bytes": int(cfg.memory_limit_gb * 2**30) if cfg.on_cpu else 0}
        try:
            self.pid, self.conn = forks.spawn(shell, self.forked + 120)
        except BaseException:
            shutil.rmtree(self.job_dir, ignore_errors=True)
            raise

    def alive(self) -> bool:
        return not self.conn.closed_by_peer()

    def stop(self) -> None:
        kill_group(self.pid)
        wait_gone(self.pid)  # its orphans are re-parented to the fork server only once it is dead

    def kill(self) -> None:
        """Stops it and removes its folder: a spare that never ran a candidate left nothing else."""
        self.stop()
        shutil.rmtree(self.job_dir, ignore_errors=True)


class Launch:
    """A candidate's worker: the Evaluator's spare, or one forked now (`start`, when its memory reservation
    is registered, or right away on the CPU), then given its job. An error while starting is kept for
    `_run_candidate` to turn into a verdict."""

    def __init__(self, forks: ForkClient, job: CandidateJob, code: str, tolerance: dict, spare: Worker | None):
        self.forks, self.job, self.code, self.tolerance = forks, job, code, tolerance
        self.worker = spare
        self.started: float | None = None  # when the job was sent
        self.error: Exception | None = None
        self.ended = False

    @property
    def forked(self) -> float | None:
        """When its process was forked (before `started` for a spare)."""
        return self.worker.forked if self.worker else None

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker else None

    @property
    def conn(self) -> Conn | None:
        return self.worker.conn if self.worker else None

    def start(self) -> None:
        self.started = time.monotonic()
        try:
            if self.worker is not None and not self.worker.alive():
                self.worker.kill()  # died meanwhile (e.g. with its judge's PID namespace): fork another
                self.worker = None
            if self.worker is None:
                self.worker = Worker(self.forks)
            self.job.job_dir = self.worker.job_dir
            self.job.candidate_file = str(Path(self.job.job_dir) / "candidate.py")
            Path(self.job.candidate_file).write_text(self.code)
            self.conn.deadline = self.started + self.forks.cfg.timeout_s
            self.conn.send(Assign(job=self.job.to_dict()))
        except (HarnessError, TimeoutError, OSError) as e:
            self.error = e if isinstance(e, (HarnessError, TimeoutError)) else \
                HarnessError(f"the worker could not be given its candidate: {e}")

    def reported(self) -> bool:
        """Whether the worker is done loading and compiling its candidate: it has said something (Ready
        or a failure; it sends nothing before), it is gone, it could not be started, or its start ran
        past the candidate's timeout (`_run_candidate` then times it out). Polled while its memory
        reservation waits; reads nothing."""
        if self.started is None:
            return False
        if self.error is not None or self.worker is None or time.monotonic() > self.conn.deadline:
            return True
        try:
            return bool(select.select([self.conn.sock], [], [], 0)[0])
        except (OSError, ValueError):  # closed
            return True

    def end(self) -> None:
        """Kills the worker and whatever it left, and removes its folder; once, whenever it ends."""
        if self.ended:
            return
        self.ended = True
        if self.worker is None:
            return
        self.worker.stop()
        try:
            self.forks.sweep()
        except HarnessError:
            pass  # the fork server died: _ensure_server starts a new one before the next candidate
        shutil.rmtree(self.worker.job_dir, ignore_errors=True)  # after the sweep: nothing writes there now

    def __enter__(self) -> "Launch":
        return self

    def __exit__(self, *exc) -> None:
        self.end()  # a worker started while its reservation waited, and never run, is not left behind
