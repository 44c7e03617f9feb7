"""Pre-warmed fork server: torch and triton imported once, one fork per candidate.

    python -m kbencheval.eval.forkserver     (started by the harness; speaks JSON lines on stdin/stdout)

A cold CUDA process costs seconds of imports; a fork of this process costs milliseconds. CUDA is
never initialised here, so forked children may initialise it. Every child starts its own session
(process group) so the harness can kill it and all its descendants at once, and this process is a
child subreaper: anything a candidate leaves behind is re-parented here and swept away.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _preload():
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import kbencheval.eval.worker  # noqa: F401


def _child(job: dict) -> None:
    os.setsid()
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # not inherited across fork
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log = os.open(os.path.join(job["job_dir"], "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    # The parent's stdout is the control pipe: a candidate's prints must never reach it.
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    import faulthandler

    faulthandler.enable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job.get("memory_limit_bytes"):
        limit = int(job["memory_limit_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(job["socket"])
    from kbencheval.eval.worker import run_job

    run_job(job, sock)


def main() -> None:
    _preload()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # A harness killed outright (e.g. ray.kill of an eval actor) must not leave this server behind.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)
    exits: dict[int, int] = {}

    def reap(*_):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exits[pid] = status

    signal.signal(signal.SIGCHLD, reap)
    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "spawn":
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    _child(msg["job"])
                except BaseException:  # noqa: BLE001 - the exit code carries it; the log has the trace
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            reply = {"pid": pid}
        elif op == "exit_status":
            reap()
            status = exits.pop(msg["pid"], None)
            if status is None:
                reply = {"known": False}
            elif os.WIFSIGNALED(status):
                reply = {"known": True, "signal": os.WTERMSIG(status)}
            else:
                reply = {"known": True, "code": os.WEXITSTATUS(status)}
        elif op == "sweep":
            # Direct children that are not kept are leftovers: orphans re-parented to this subreaper.
            keep = set(msg.get("keep", []))
            killed = 0
            for pid in _children(os.getpid()):
                if pid not in keep:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        pass
            reap()
            reply = {"killed": killed}
        else:
            reply = {"error": f"unknown op {op}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def _children(ppid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == ppid and fields[0] != "Z":
                kids.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return kids


if __name__ == "__main__":
    main()
