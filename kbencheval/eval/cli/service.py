"""A persistent local evaluator: one `Evaluator` answering `kbench check` over a Unix domain socket (its
client: client.py).

    kbench serve-eval --device cuda:0                 # then, in any shell of the same user:
    kbench check --ref p.py --kernel k.py --device cuda:0 --json     # served when the config matches

Wire format, one JSON line each way per connection:
    request  {"op": "evaluate", "problem": {"source", "name", "level", "problem_id", "path"},
              "candidate": TEXT, "config": asdict(EvalConfig), "wait_s": SECONDS, "code": code_version()}
             {"op": "ping"}  ->  {"ok": true, "config": ..., "pid": ..., "served": N, "busy": B, "queued": N}
    reply    EvalResult.to_dict(), with checks["served_by"]; or {"refused": KIND, "message": ONE_LINE}
KIND: bad_request, config_mismatch (with "keys"), code_mismatch, queue_timeout, stopping, wrong_user.

The server is trusted code like the harness: it parses problems statically and hands candidates to
`Evaluator.evaluate`, whose sandboxed workers are the only place candidate code runs. Only the same
user can connect (private folder, socket mode 0600, and the peer's uid checked on both ends): a
request carries a reference problem, which the judge runs, the trust of running kbench check yourself.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import queue
import socket
import stat
import struct
import threading
import time
from pathlib import Path

from kbencheval.config import ConfigError, from_dict
from kbencheval.dataset import Problem, ProblemError, parse_problem
from kbencheval.eval.config import EvalConfig
from kbencheval.eval.result import EvalResult

MAX_REQUEST_BYTES = 64 << 20
REQUEST_READ_S = 30.0  # a connected client that sends no complete line by then is dropped
REPLY_MARGIN_S = 300.0  # on top of the queue wait and timeout_s: the judge's reference run, start-ups


class ServiceUnavailable(RuntimeError):
    """No usable server: the message is one line saying why (the caller falls back to a local Evaluator)."""


class _Refused(Exception):
    def __init__(self, kind: str, message: str, **extra):
        super().__init__(message)
        self.reply = {"refused": kind, "message": message, **extra}


# -- where the socket lives --
def default_socket_path(device: str) -> Path:
    """Per user and device: $XDG_RUNTIME_DIR/kbench/eval-cuda0.sock, else /tmp/kbench-<uid>/eval-cuda0.sock."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "kbench" if runtime and os.path.isdir(runtime) else Path(f"/tmp/kbench-{os.getuid()}")
    name = EvalConfig(device=device).device_index.replace(":", "")
    return base / f"eval-{name}.sock"


def private_dir(path: Path, *, create: bool) -> None:
    """Make (or check) a folder only this user can enter; another user's or an open one is refused, since
    whoever controls it could answer in our server's place."""
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ServiceUnavailable(f"{path} is not a private folder of yours (owner uid {st.st_uid}, mode "
                                 f"{oct(st.st_mode & 0o777)}): remove it, or pass --socket elsewhere")


def _peer_uid(sock: socket.socket) -> int:
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid


def _recv_line(sock: socket.socket, deadline: float, limit: int = MAX_REQUEST_BYTES) -> bytes | None:
    """One line, or None if the peer closed first; TimeoutError past `deadline`, ValueError past `limit`."""
    buf = b""
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            raise TimeoutError from None
        if not chunk:
            return None
        buf += chunk
        if len(buf) > limit:
            raise ValueError(f"request over {limit} bytes")
    return buf.split(b"\n", 1)[0]


def _send(sock: socket.socket, obj: dict) -> None:
    try:
        sock.settimeout(10)
        sock.sendall((json.dumps(obj) + "\n").encode())
    except OSError:  # the client gave up; its loss
        pass


# -- request checks (shared by server and tests) --
@functools.lru_cache(maxsize=None)
def code_version() -> str:
    """A hash of kbencheval's sources (problems aside): a server started before a change would otherwise
    judge with the old code while the config still matches. Cached: hashing every source is not free."""
    root = Path(__file__).resolve().parents[2]  # kbencheval/
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "problems" not in p.relative_to(root).parts):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def config_mismatch(server: EvalConfig, client: EvalConfig) -> list[str]:
    """Keys whose values differ; `cuda` equals `cuda:0`, the order of allowed_ops does not matter."""
    def norm(cfg: EvalConfig) -> dict:
        d = dataclasses.asdict(cfg)
        d["device"], d["allowed_ops"] = cfg.device_index, sorted(cfg.allowed_ops)
        return d
    a, b = norm(server), norm(client)
    return [k for k in a if a[k] != b[k]]


def parse_request(line: bytes, cfg: EvalConfig) -> tuple[Problem, str, float] | None:
    """(problem, candidate text, wait_s) of an evaluate request, None for a ping, or _Refused saying what is wrong."""
    try:
        req = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _Refused("bad_request", f"the request is not one JSON line ({e})") from None
    if isinstance(req, dict) and req.get("op") == "ping":
        return None
    if not isinstance(req, dict) or req.get("op") != "evaluate":
        raise _Refused("bad_request", "the request needs op=evaluate (or ping)")
    prob, text, wanted = req.get("problem"), req.get("candidate"), req.get("config")
    if not isinstance(prob, dict) or not isinstance(prob.get("source"), str) or not isinstance(text, str) \
            or not isinstance(wanted, dict):
        raise _Refused("bad_request", "an evaluate request carries problem.source, candidate and config")
    try:
        client_cfg = from_dict(EvalConfig, wanted, where="the request's config")
        problem = parse_problem(prob["source"], level=int(prob.get("level", 0)),
                                problem_id=int(prob.get("problem_id", 0)), name=str(prob.get("name", "")),
                                path=str(prob.get("path", "")))
        wait_s = float(req.get("wait_s", 600))
    except (ConfigError, ProblemError, TypeError, ValueError) as e:
        raise _Refused("bad_request", str(e).splitlines()[0]) from None
    if req.get("code", code_version()) != code_version():
        raise _Refused("code_mismatch", "the server runs other kbencheval code (started before a change, or from "
                       "another checkout): restart kbench serve-eval")
    keys = config_mismatch(cfg, client_cfg)
    if keys:
        ours, theirs = dataclasses.asdict(cfg), dataclasses.asdict(client_cfg)
        shown = ", ".join(f"{k}: server {ours[k]!r}, here {theirs[k]!r}" for k in keys)
        raise _Refused("config_mismatch", f"the server runs another config ({shown})", keys=keys)
    return problem, text, wait_s


# -- the server --
@dataclasses.dataclass
class _Job:
    conn: socket.socket
    problem: Problem
    text: str
    wait_s: float
    received: float


class Stopped(BaseException):
    """Raised by the signal handler in the main thread; BaseException so `evaluate` does not catch it."""


class EvalService:
    """Serves one Evaluator on `path`; `run()` evaluates in the calling (main) thread until `Stopped`.

    Evaluations run in the thread that built the Evaluator: the fork server dies with the thread that
    started it (PDEATHSIG), and a restarted one is started by the evaluating thread."""

    def __init__(self, evaluator, path: Path):
        self.ev, self.path = evaluator, Path(path)
        self.jobs: queue.Queue[_Job] = queue.Queue()
        self.served, self.started, self.busy = 0, time.monotonic(), False
        self.listener = bind_socket(self.path)
        threading.Thread(target=self._accept_loop, name="kbench-accept", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed at shutdown
                return
            threading.Thread(target=self._read_request, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> None:
        """Answers refusals and pings at once, so a client never queues behind a running candidate for them."""
        try:
            if _peer_uid(conn) != os.getuid():
                raise _Refused("wrong_user", "only the user who started this server may use it")
            line = _recv_line(conn, time.monotonic() + REQUEST_READ_S)
            if line is None:
                conn.close()
                return
            parsed = parse_request(line, self.ev.cfg)
            if parsed is None:
                _send(conn, {"ok": True, "pid": os.getpid(), "served": self.served, "busy": self.busy,
                             "queued": self.jobs.qsize(), "socket": str(self.path),
                             "config": dataclasses.asdict(self.ev.cfg)})
                conn.close()
                return
            self.jobs.put(_Job(conn, *parsed, time.monotonic()))
        except _Refused as e:
            _send(conn, e.reply)
            conn.close()
        except (TimeoutError, ValueError, OSError) as e:  # too slow or oversized
            _send(conn, {"refused": "bad_request", "message": f"unreadable request: {type(e).__name__} {e}".strip()})
            conn.close()

    def run(self) -> None:
        """Evaluate queued requests in arrival order until Stopped; then refuse what is left and clean up."""
        job = None
        try:
            while True:
                try:
                    job = self.jobs.get(timeout=0.5)
                except queue.Empty:
                    continue
                self._serve(job)
                job = None
        except Stopped:
            pass
        finally:
            self.close(job)

    def _serve(self, job: _Job) -> None:
        if _gone(job.conn):  # the client gave up while queued
            job.conn.close()
            return
        waited = time.monotonic() - job.received
        if waited > job.wait_s:
            _send(job.conn, {"refused": "queue_timeout", "message": f"waited {waited:.0f} s for a turn "
                             f"(the client allowed {job.wait_s:g} s)"})
        else:
            self.busy = True
            try:
                result = self.ev.evaluate(job.problem, job.text)
            finally:
                self.busy = False
            self.served += 1
            result.checks["served_by"] = {"socket": str(self.path), "pid": os.getpid(), "request": self.served,
                                          "queued_s": round(waited, 3),
                                          "server_age_s": round(time.monotonic() - self.started, 1)}
            _send(job.conn, result.to_dict())
        job.conn.close()

    def close(self, current: _Job | None = None) -> None:
        self.listener.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        pending = [current] if current else []
        while not self.jobs.empty():
            pending.append(self.jobs.get_nowait())
        for job in pending:
            _send(job.conn, {"refused": "stopping", "message": "the server stopped before this request ran"})
            job.conn.close()
        self.ev.close()


def _gone(conn: socket.socket) -> bool:
    conn.settimeout(0)  # with a timeout set, recv would first wait for data (none comes) and time out
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def check_socket_free(path: Path) -> None:
    """Before starting the Evaluator: refuse a path another server answers on; clear a stale socket."""
    if not os.path.lexists(path):
        return
    if not stat.S_ISSOCK(os.lstat(path).st_mode):
        raise ServiceUnavailable(f"{path} exists and is not a socket: pass another --socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(str(path))
    except OSError:  # nobody listens: a server that died without cleaning up
        os.unlink(path)
        return
    finally:
        probe.close()
    raise ServiceUnavailable(f"a server already answers at {path}: stop it first, or pass another --socket")


def bind_socket(path: Path) -> socket.socket:
    """Listen on `path` with mode 0600 from the start (umask around bind: no window where others may connect)."""
    check_socket_free(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    sock.listen(64)
    return sock
