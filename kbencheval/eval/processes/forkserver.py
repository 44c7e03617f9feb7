"""Pre-warmed fork server: torch and triton imported once, one fork per candidate.

    python -m kbencheval.eval.processes.forkserver '<sandbox plan as JSON>'   (started by the harness; JSON lines on stdin/stdout)

A cold CUDA process costs seconds of imports; a fork of this process costs milliseconds. CUDA is
never initialised here, so forked children may initialise it. Before importing anything heavy the
server enters its sandbox (kbencheval/eval/processes/sandbox): its own user, mount, IPC, network and UTS
namespaces, a read-only root, a private /dev/shm and /tmp. The judge is forked as PID 1 of a fresh
PID namespace and every candidate worker into that namespace, where it sees and can signal only
its own processes. Each worker then mounts its own /proc and /tmp, drops every capability, and
(after CUDA is up) applies Landlock and seccomp before any candidate code runs. Every child also
starts its own session so the harness can kill it and all its descendants at once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import socket
import sys

from kbencheval.eval.processes import sandbox
from kbencheval.eval.processes.sandbox._linux import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, prctl


# preload, job_env and block_while_waiting are the fork server's setup steps, public so that tests run each
# one alone (the server itself runs them in order: preload once, the others per forked job).
def preload(plan: dict):
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import kbencheval.eval.untrusted.worker  # noqa: F401
    # The judge is forked from here and imports its room after lock-down, when its folder can no longer be
    # listed: the package is imported now (the judge module itself only in the judge's process).
    importlib.util.find_spec("kbencheval.eval.trusted.judge")

    if plan.get("compile_arch"):  # Triton's first compile, paid once here instead of in every worker
        import shutil
        import tempfile

        from kbencheval.eval.processes.sandbox import tritoncache

        folder = tempfile.mkdtemp(prefix="compile-warm-", dir=plan["scratch"])
        try:
            tritoncache.compile_only(int(plan["compile_arch"]), folder)
        except Exception as e:  # noqa: BLE001 - an optimisation: workers then pay it, as before
            print(f"fork server: Triton's compiler not warmed ({type(e).__name__}: {e})", file=sys.stderr)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def job_env(job: dict, plan: dict, layers: list[str]) -> None:
    """Per-job folders: a private Triton cache (layered over the shared ones), TMPDIR, HOME, extensions,
    torch.compile's cache. Each is named outright: torch writes the first folder it picked into the
    environment (TORCHINDUCTOR_CACHE_DIR), so one picked in the fork server would point into its scratch,
    which a sandboxed job cannot write."""
    from kbencheval.eval.processes.sandbox import tritoncache  # imports triton: never before the sandbox is entered

    job_dir = job["job_dir"]
    for name in ("tmp", "triton_cache", "torch_extensions", "torchinductor"):
        os.makedirs(os.path.join(job_dir, name), exist_ok=True)
    os.environ.update(HOME=job_dir, TMPDIR=os.path.join(job_dir, "tmp"),
                      TORCH_EXTENSIONS_DIR=os.path.join(job_dir, "torch_extensions"),
                      TORCHINDUCTOR_CACHE_DIR=os.path.join(job_dir, "torchinductor"))
    if job["kind"] != "judge":  # the judge writes the first shared layer, the harness the second
        os.environ["TRITON_CACHE_DIR"] = os.path.join(job_dir, "triton_cache")
        # What the harness builds (launchers.py, kernel_cache.py), only where the worker cannot write it.
        read_only = plan.get("under_bwrap") or {"landlock-fs", "ro-root"} & set(layers)
        if plan.get("shared_cache"):
            shared = [plan["shared_cache"]]
            if plan.get("launcher_cache") and read_only:
                shared.append(plan["launcher_cache"])
            os.environ["TRITON_CACHE_MANAGER"] = tritoncache.MANAGER
            os.environ[tritoncache.SHARED_ENV] = os.pathsep.join(shared)
        if plan.get("kernel_cache") and read_only and job["kind"] == "candidate":
            from kbencheval.eval.sharing.kernel_cache import FOLDER_ENV

            os.environ[FOLDER_ENV] = plan["kernel_cache"]
    else:  # it compiles its own comparison kernels (judge_kernels) as it meets new dtypes
        os.environ["TRITON_CACHE_DIR"] = plan.get("shared_cache") or os.path.join(job_dir, "triton_cache")
    import tempfile

    tempfile.tempdir = None  # computed again from TMPDIR


def block_while_waiting(device: str) -> None:
    """Makes this process sleep, not spin, while it waits for the device. By default (one context per
    process, fewer contexts than cores) CUDA spins in every host sync, so with eight Evaluators sixteen
    workers and judges may spin on sixteen cores beside Triton's compiles and the harness. It measured
    no throughput change (docs/history/evaluator-performance.md), but frees the cores of a shared node.
    Set on the primary context before torch creates it; without libcuda (ROCm) or on a driver error it
    stays as it was."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    dev = ctypes.c_int()
    CU_CTX_SCHED_BLOCKING_SYNC = 0x04
    if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), int(device.partition(":")[2] or 0)) == 0:
        cuda.cuDevicePrimaryCtxSetFlags_v2(dev, ctypes.c_uint(CU_CTX_SCHED_BLOCKING_SYNC))


def _child(job: dict, plan: dict, layers: list[str]) -> None:
    import time

    clock = {"forked": time.monotonic()}  # where its start goes: the worker reports it in checks["start_s"]
    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # not inherited across fork
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
    done = sandbox.prepare_worker(plan, layers, job["job_dir"], job["kind"])
    job_env(job, plan, layers)
    if job["kind"] != "judge":  # the judge is PID 1: a handler would let candidates' signals through
        import faulthandler

        faulthandler.enable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job.get("memory_limit_bytes"):
        limit = int(job["memory_limit_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sock = None
    if job.get("socket"):  # a compile child (kernel_cache.py) answers with its exit status only
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(job["socket"])
    if job["device"].startswith("cuda"):
        import torch

        block_while_waiting(job["device"])
        # CUDA must be up before Landlock and seccomp (it writes under /proc while it starts).
        torch.cuda.set_device(job["device"])
        torch.zeros(1, device=job["device"])
        if job["kind"] == "judge" and plan.get("shared_cache"):
            from kbencheval.eval.processes.sandbox import tritoncache

            tritoncache.warm(job["device"])
    clock["device_up"] = time.monotonic()
    writable = [job["job_dir"], "/tmp", "/dev/shm"]
    if job["kind"] == "judge" and plan.get("shared_cache"):
        writable.append(plan["shared_cache"])  # trusted, and the shared cache's only writer
    # Reads beyond the allow-list (sandbox/reads.py): the judge reads every job's outputs, a worker the caches.
    readable = [plan["scratch"]] if job["kind"] == "judge" else \
        [plan.get(k) or "" for k in ("shared_cache", "launcher_cache", "kernel_cache")]
    done += sandbox.lock_down(layers, writable=writable, readable=readable)
    expected = {layer for layer in sandbox.WORKER_LAYERS if layer in layers and layer != "pid-ns"}
    if not expected <= set(done):
        raise RuntimeError(f"sandbox layers failed in this worker: {sorted(expected - set(done))}")
    clock["locked"] = time.monotonic()
    run_child(job, sock, clock)


def run_child(job: dict, sock, clock: dict) -> None:
    """What a forked child runs, by its kind: the trusted judge, the harness's compile of a reported kernel
    (no candidate code), or a candidate worker. Routed here so the untrusted worker never imports the judge."""
    os.chdir(job["job_dir"])
    if job["kind"] == "compile":
        from kbencheval.eval.sharing.kernel_cache import compile_job

        compile_job(job["job_dir"], int(job["arch"]))
    elif job["kind"] == "judge":
        from kbencheval.eval.contract.protocol import JudgeJob
        from kbencheval.eval.trusted.judge import run_judge

        run_judge(JudgeJob(**job), sock)
    else:
        from kbencheval.eval.untrusted.worker import run_candidate

        run_candidate(job, sock, clock)


def main() -> None:
    plan = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {"mode": "none"}
    server = sandbox.ServerSandbox(plan)
    server.enter()  # while single-threaded, before torch starts any thread
    preload(plan)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    # A harness killed outright (e.g. ray.kill of an eval actor) must not leave this server behind.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)
    layers: list[str] = []  # filled in by the probe below
    missing: dict[str, str] = {}
    server.start_helper({"probe": sandbox.probe_child, "judge": lambda p: _run_child(p["job"], plan, p["layers"]),
                         "idle": _idle_init})
    if plan.get("mode", "none") != "none":
        probe_dir = os.path.join(plan["scratch"], "probe")
        os.makedirs(probe_dir, exist_ok=True)
        found, missing = sandbox.probe(server, plan, probe_dir)
        layers.extend(found)
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
    out.write(json.dumps({"ready": True, "pid": os.getpid(), "layers": layers, "missing": missing}) + "\n")
    out.flush()
    judge: set[int] = set()
    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "spawn":
            job = msg["job"]
            try:
                if job["kind"] in ("judge", "idle") and "pid-ns" in layers:  # "idle": the compile server's
                    pid, init = server.spawn_init(job["kind"], {"job": job, "layers": layers})
                    judge = {pid, init}
                elif job["kind"] == "idle":  # no PID namespace: compile children are plain children
                    pid = init = None
                else:
                    pid = init = os.fork()  # into the judge's PID namespace, when there is one
                    if pid == 0:
                        _run_child(job, plan, layers)
                    judge = {pid} if job["kind"] == "judge" else judge
            except OSError as e:  # no PID namespace to fork into: its init, the judge, is gone
                reply = {"error": f"cannot start the {job['kind']}: {e.strerror}"}
            else:
                reply = {"pid": pid, "init": init if job["kind"] in ("judge", "idle") else pid}
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
            reply = {"killed": _sweep(server, set(msg.get("keep", [])) | judge | {server.helper_pid})}
        else:
            reply = {"error": f"unknown op {op}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def _idle_init(_payload) -> None:
    """PID 1 of the compile server's PID namespace (server.CompileServer): its compile children are
    forked into it, as candidates' workers are into their judge's; it runs nothing and reaps orphans."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    while True:
        signal.pause()


def _run_child(job: dict, plan: dict, layers: list[str]) -> None:
    code = 0
    try:
        _child(job, plan, layers)
    except BaseException:  # noqa: BLE001 - the exit code carries it; the log has the trace
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _sweep(server: sandbox.ServerSandbox, keep: set) -> int:
    """Kill every leftover: direct children not kept, and every other process in the judge's PID namespace."""
    killed = 0
    for pid in set(_children(os.getpid())) | set(server.members()):
        if pid in keep:
            continue
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed += 1
    server.wipe_shared_places()
    return killed


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
