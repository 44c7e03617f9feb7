"""The client of `kbench serve-eval` (service.py): `request_eval` and `ping` over the server's Unix socket,
refusing a server that runs as another user. `kbench check` falls back to its own Evaluator on
`ServiceUnavailable`."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

from kbencheval.dataset import Problem
from kbencheval.eval.cli.service import REPLY_MARGIN_S, ServiceUnavailable, _peer_uid, _recv_line, code_version
from kbencheval.eval.config import EvalConfig
from kbencheval.eval.result import EvalResult


def _connect(path: Path) -> socket.socket:
    if not os.path.lexists(path):
        raise ServiceUnavailable(f"no evaluation server at {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(str(path))
    except OSError as e:
        sock.close()
        raise ServiceUnavailable(f"no evaluation server answers at {path} ({e.strerror or e})") from None
    uid = _peer_uid(sock)
    if uid != os.getuid():  # someone else's process could forge verdicts
        sock.close()
        raise ServiceUnavailable(f"the server at {path} runs as uid {uid}, not as you: remove it or pass --socket")
    return sock


def _call(path: Path, request: dict, deadline_s: float) -> dict:
    sock = _connect(path)
    try:
        sock.settimeout(30)
        sock.sendall((json.dumps(request) + "\n").encode())
        line = _recv_line(sock, time.monotonic() + deadline_s, limit=1 << 30)
    except TimeoutError:
        raise ServiceUnavailable(f"the server at {path} did not answer within {deadline_s:.0f} s") from None
    except (OSError, ValueError) as e:
        raise ServiceUnavailable(f"the connection to the server at {path} failed ({e})") from None
    finally:
        sock.close()
    try:
        reply = json.loads(line) if line is not None else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        reply = None
    if not isinstance(reply, dict):
        raise ServiceUnavailable(f"the server at {path} closed the connection without a readable reply")
    return reply


def ping(path: Path, timeout_s: float = 10.0) -> dict:
    return _call(Path(path), {"op": "ping"}, timeout_s)


def request_eval(path: Path, problem: Problem, text: str, cfg: EvalConfig, *, wait_s: float = 600.0) -> EvalResult:
    """The served verdict, or ServiceUnavailable (one line: no server, config mismatch, refusal) to fall back on."""
    path = Path(path)
    request = {"op": "evaluate", "candidate": text, "config": dataclasses.asdict(cfg), "wait_s": wait_s,
               "code": code_version(),
               "problem": {"source": problem.source, "name": problem.name, "level": problem.level,
                           "problem_id": problem.problem_id, "path": problem.path}}
    reply = _call(path, request, wait_s + cfg.timeout_s + REPLY_MARGIN_S)
    if "refused" in reply:
        raise ServiceUnavailable(f"{reply.get('message', reply['refused'])} (server at {path})")
    try:
        return EvalResult.from_dict(reply)
    except (KeyError, TypeError, ValueError) as e:
        raise ServiceUnavailable(f"the server at {path} sent a reply that is no EvalResult ({e})") from None
