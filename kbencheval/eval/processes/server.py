"""The fork server's process, seen from the harness: how it is started (sandbox plan, allowlisted
environment, bubblewrap when asked for) and its JSON-lines control pipe.

The fork server itself (kbencheval/eval/processes/forkserver.py) enters the kernel sandbox; `_Server` reads
back which layers are active, which `EvalResult.sandbox` then lists.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kbencheval.eval.config import EvalConfig
from kbencheval.eval.sharing.gate import physical_device_key
from kbencheval.eval.sharing.kernel_cache import shared_compiler
from kbencheval.eval.sharing.launchers import shared_builder
from kbencheval.eval.processes.sandbox import minimum
from kbencheval.eval.processes.sandbox.env import sandbox_env
from kbencheval.eval.contract.errors import tail

__all__ = ["HarnessError", "bwrap_args", "bwrap_profile", "bwrap_works"]


def bwrap_args(scratch: str, hide: list[str] = (), writable_proc: bool = False) -> list[str]:
    """bubblewrap: read-only root, writable scratch, private /tmp, no network; hidden files read as empty.

    The host /proc is bound rather than a fresh procfs: CUDA fails to initialise (error 304) under a
    new one. On some hosts CUDA also needs /proc writable; `writable_proc` allows
    that while keeping /proc/sys (kernel settings) read-only.
    """
    proc = ["--bind", "/proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"] if writable_proc else \
        ["--ro-bind", "/proc", "/proc"]
    args = ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", *proc, "--tmpfs", "/tmp"]
    # The private /tmp must not hide this interpreter, its packages or this checkout (CI clones into /tmp).
    needed = {sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[3]), *sys.path}
    for path in sorted(p for p in needed if p and p.startswith("/tmp/") and Path(p).exists()):
        args += ["--ro-bind", path, path]
    args += ["--bind", scratch, scratch, "--unshare-net", "--die-with-parent"]
    for path in hide:
        if Path(path).is_file():
            args += ["--ro-bind", "/dev/null", str(Path(path).resolve())]
    return args


@functools.lru_cache(maxsize=None)
def bwrap_profile(device_type: str = "cpu") -> dict | None:
    """The strictest bwrap profile under which this machine runs our work (CUDA included), or None."""
    if not shutil.which("bwrap"):
        return None
    probe = ["true"] if device_type == "cpu" else [
        sys.executable, "-c", "import torch; torch.zeros(1, device='cuda').sum().item()"]
    for profile in ({"writable_proc": False}, {"writable_proc": True}):
        scratch = tempfile.mkdtemp(prefix="kbench-probe-")
        try:
            if subprocess.run(bwrap_args(scratch, **profile) + probe, capture_output=True, timeout=120).returncode == 0:
                return profile
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return None


def bwrap_works(device_type: str = "cpu") -> bool:
    return bwrap_profile(device_type) is not None


@functools.lru_cache
def nvidia_arch(device: str) -> int | None:
    """`cuda:N`'s compute capability as nvidia-smi reports it (90 for 9.0), without initialising
    CUDA in this process; None where there is no nvidia-smi (ROCm) or it does not know the device."""
    try:
        out = subprocess.run(["nvidia-smi", "-i", physical_device_key(device).removeprefix("gpu-"),
                              "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        major, minor = out.stdout.split()[0].split(".")
        return int(major) * 10 + int(minor)
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


class HarnessError(RuntimeError):
    """The harness itself cannot run (e.g. the fork server failed to start)."""


class _Server:
    """The fork server process and its JSON-lines control pipe."""

    def __init__(self, cfg: EvalConfig, scratch: Path, hide: list[str], wait: bool = True):
        """Starts the fork server; `wait=False` returns at once and `wait_ready()` waits for it, so
        several servers boot side by side while the calling thread (their PDEATHSIG parent) stays."""
        # The package must be importable inside the sandbox even when run from a source checkout.
        pkg_root = str(Path(__file__).resolve().parents[3])
        env = sandbox_env(dict(os.environ), scratch=str(scratch), extra_pythonpath=pkg_root, on_cpu=cfg.on_cpu)
        if cfg.cpu_threads:
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(cfg.cpu_threads)
        shared_cache = scratch / "triton_shared"
        shared_cache.mkdir(exist_ok=True)
        # KBENCH_SHARED_TRITON_CACHE=0 turns the judge-built shared layer off (benchmarks/sandbox_overhead.py).
        share = os.environ.get("KBENCH_SHARED_TRITON_CACHE", "1") != "0"
        arch = None if cfg.on_cpu else nvidia_arch(cfg.device_index)
        # Launchers the harness builds (launchers.py): NVIDIA's, for sandboxed workers.
        self.launchers = shared_builder() if share and arch and cfg.sandbox != "none" else None
        # Kernels the harness compiles from candidates' reports (kernel_cache.py), in a server of their own.
        self.kernels = (shared_compiler(functools.partial(CompileServer, cfg, hide), arch)
                        if share and arch and cfg.sandbox != "none" else None)
        plan = {"mode": "none" if cfg.sandbox == "none" else "kernel", "scratch": str(scratch),
                "shared_cache": str(shared_cache) if share else "", "hide": [str(Path(p).resolve()) for p in hide],
                "launcher_cache": self.launchers.folder if self.launchers else "",
                "kernel_cache": self.kernels.folder if self.kernels else "", "compile_arch": arch}
        cmd = [sys.executable, "-m", "kbencheval.eval.processes.forkserver", json.dumps(plan)]
        self.protections = ["process-group", "timeout", "leftover-sweep", "env-allowlist",
                            "memory-rlimit" if cfg.on_cpu else "memory-watchdog"]
        device_type = "cpu" if cfg.on_cpu else "cuda"
        profile = bwrap_profile(device_type) if cfg.sandbox in ("auto", "bwrap") else None
        if cfg.sandbox == "bwrap" and profile is None:
            raise HarnessError(f"sandbox=bwrap but bubblewrap is missing or cannot run {device_type} work here; "
                               "install bubblewrap or set sandbox=auto")
        self.missing: dict[str, str] = {}
        if profile is not None:  # bubblewrap already gives a read-only root and a private /tmp
            plan["under_bwrap"] = True
            cmd = cmd[:-1] + [json.dumps(plan)]
            cmd = bwrap_args(str(scratch), hide, **profile) + cmd
            self.protections.append("bwrap")
        elif cfg.sandbox == "auto":
            self.missing["bwrap"] = ("bubblewrap is not installed" if not shutil.which("bwrap")
                                     else f"bubblewrap cannot run {device_type} work on this machine")
        self.stderr = open(scratch / "forkserver.log", "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=env, start_new_session=True, text=True, bufsize=1)
        self.lock = threading.Lock()
        self._scratch, self._sandbox_off, self.ready = scratch, cfg.sandbox == "none", False
        self._accept = list(cfg.sandbox_accept)
        self.accepted_missing: list[str] = []  # parts of the minimum sandbox missing here, as the user accepted
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            ready = self._read(timeout=180)
        except HarnessError:
            ready = {}
        if not ready.get("ready"):
            self.close()
            raise HarnessError(f"fork server failed to start: {tail(self._scratch / 'forkserver.log', 4)}")
        self.protections += ready.get("layers", [])
        if not {"bwrap", "landlock-fs", "ro-root"} & set(self.protections):
            self.kernels = None  # its workers could write the folder, so are not offered it (forkserver.job_env)
        self.missing.update(ready.get("missing", {}))
        if self._sandbox_off:
            self.missing["kernel-sandbox"] = "sandbox=none"
        else:  # fail closed: untrusted code runs only inside the minimum sandbox, or what the user accepted
            unmet = minimum.unmet(self.protections)
            if refused := [u for u in unmet if u not in self._accept]:
                self.close()
                raise HarnessError(minimum.refusal(refused, self.missing))
            self.accepted_missing = unmet
        self.ready = True

    def _read(self, timeout: float) -> dict:
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if r else ""
        if not line:
            raise HarnessError("fork server stopped answering")
        return json.loads(line)

    def call(self, **msg) -> dict:
        with self.lock:
            if self.proc.poll() is not None:
                raise HarnessError("fork server exited")
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            return self._read(timeout=60)

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self.stderr.close()


class CompileServer:
    """The fork server that compiles reported kernels (kernel_cache.KernelCompiler): each compile is a
    child under the workers' sandbox layers, its job folder its only writable place, no device."""

    def __init__(self, cfg: EvalConfig, hide: list[str]):
        self.scratch = tempfile.mkdtemp(prefix="kbench-compile-")
        self._server = _Server(cfg, Path(self.scratch), hide)
        # A PID namespace for the compiles, as the judge is for candidates (none without the layer).
        reply = self._server.call(op="spawn", job={"kind": "idle", "job_dir": self.scratch, "device": "cpu"})
        if "error" in reply:
            self.close()
            raise HarnessError(reply["error"])

    def run(self, job_dir: str, arch: int, timeout_s: float) -> None:
        """Compiles job_dir's kernel.ttir in a fresh child; raises unless it exits 0 within timeout_s."""
        import time

        reply = self._server.call(op="spawn", job={"kind": "compile", "device": "cpu", "job_dir": job_dir,
                                                   "socket": "", "arch": arch})
        if "error" in reply:
            raise HarnessError(reply["error"])
        deadline = time.monotonic() + timeout_s
        while not (status := self._server.call(op="exit_status", pid=reply["pid"]))["known"]:
            if time.monotonic() > deadline:
                self._server.call(op="sweep")
                raise TimeoutError(f"the compile took over {timeout_s:g}s")
            time.sleep(0.02)
        if status.get("code") != 0:
            raise RuntimeError(f"the compile child failed: {tail(Path(job_dir) / 'worker.log', 2)}")

    def close(self) -> None:
        self._server.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
