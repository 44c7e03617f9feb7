"""The evaluator: one call turns an LLM response into a trustworthy `EvalResult`.

    with Evaluator(EvalConfig(device="cpu")) as ev:
        result = ev.evaluate(problem, llm_text)

The harness process never runs candidate code. It starts a pre-warmed fork server (inside
bubblewrap when available), keeps a trusted judge process that owns the reference outputs, forks a
fresh worker per candidate, relays output descriptors from worker to judge, enforces the deadline
and memory cap, and kills the worker's whole process group afterwards.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

from kbencheval.dataset import Problem
from kbencheval.eval.result import EvalResult, Status, TimingStats
from kbencheval.extract import extract_code, static_check


@dataclasses.dataclass(kw_only=True)
class EvalConfig:
    device: str = "cpu"
    """cpu (Triton interpreter, correctness only), cuda, or cuda:N (ROCm GPUs also appear as cuda)."""
    backend: Literal["triton", "cuda"] = "triton"
    """Which custom-kernel backend candidates must use."""
    trials: int = 5
    """Correctness trials, each with fresh seeded inputs, on one model instance."""
    timeout_s: float = 300.0
    """Hard limit for one candidate (import, compile, trials, timing); then its process group is killed."""
    small: bool | None = None
    """Run at the problem's SMALL_SIZES. Default: yes on cpu, no on GPUs."""
    atol: float | None = None
    """Absolute tolerance for every output; default per problem, else per dtype (fp32 1e-4, bf16/fp16 1e-2)."""
    rtol: float | None = None
    allowed_ops: list[str] = dataclasses.field(default_factory=list)
    """Torch ops a candidate's forward may call on top of the problem's ALLOWED_TORCH_OPS (e.g. aten.convolution)."""
    static_checks: bool = True
    """Scan the code for forbidden constructs before running it. Off only to test the run-time defences."""
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    """bwrap: no network and a read-only filesystem outside the scratch folder. auto: bwrap if it works."""
    memory_limit_gb: float = 16.0
    """Host memory cap per candidate (address space on cpu; resident memory watched on GPUs)."""
    timing: bool = True
    """Time reference and candidate (GPU only; the CPU interpreter's timings mean nothing)."""
    timing_mode: Literal["events", "cuda_graph"] = "events"
    """cuda_graph replays a captured graph: for tiny kernels where launch overhead dominates."""
    baseline: Literal["eager", "compile"] = "eager"
    """What the candidate is compared against: the eager reference or torch.compile of it."""
    warmup: int = 10
    iters: int = 100
    """Timed calls per model; reference and candidate alternate."""
    timing_input_sets: int = 8
    """Distinct fresh input sets rotated through the timed calls (at least 2, capped by timing_input_gb)."""
    timing_input_gb: float = 6.0
    """GPU memory the rotating timing inputs may take."""
    l2_flush_mb: int = 256
    seed: int = 0

    def validate(self):
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device '{self.device}' is not supported: use cpu, cuda or cuda:N")
        if self.device == "cuda":
            self.device = "cuda:0"
        if self.trials < 1:
            raise ValueError("trials must be >= 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        if self.iters < 1 or self.warmup < 0:
            raise ValueError("iters must be >= 1 and warmup >= 0")

    def __post_init__(self):
        self.validate()

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"


def bwrap_args(scratch: str, hide: list[str] = (), writable_proc: bool = False) -> list[str]:
    """bubblewrap: read-only root, writable scratch, private /tmp, no network; hidden files read as empty.

    The host /proc is bound rather than a fresh procfs: CUDA fails to initialise (error 304) under a
    new one. On the H100 machine we tested, CUDA also needed /proc writable; `writable_proc` allows
    that while keeping /proc/sys (kernel settings) read-only.
    """
    proc = ["--bind", "/proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"] if writable_proc else \
        ["--ro-bind", "/proc", "/proc"]
    args = ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", *proc, "--tmpfs", "/tmp"]
    # The private /tmp must not hide this interpreter, its packages or this checkout (CI clones into /tmp).
    needed = {sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[2]), *sys.path}
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


class HarnessError(RuntimeError):
    """The harness itself cannot run (e.g. the fork server failed to start)."""


class _Server:
    """The fork server process and its JSON-lines control pipe."""

    def __init__(self, cfg: EvalConfig, scratch: Path, hide: list[str]):
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["TRITON_CACHE_DIR"] = str(scratch / "triton_cache")
        env["TORCH_EXTENSIONS_DIR"] = str(scratch / "torch_extensions")
        env["HOME"] = str(scratch)
        env["TOKENIZERS_PARALLELISM"] = "false"
        if cfg.on_cpu:
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env.pop("TRITON_INTERPRET", None)
        # The package must be importable inside the sandbox even when run from a source checkout.
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "kbencheval.eval.forkserver"]
        self.protections = ["own process group per candidate", "hard timeout kills the whole group",
                            "leftover processes swept"]
        self.protections.append("address-space limit" if cfg.on_cpu else "resident-memory watchdog")
        device_type = "cpu" if cfg.on_cpu else "cuda"
        profile = bwrap_profile(device_type) if cfg.sandbox != "none" else None
        use_bwrap = profile is not None
        if cfg.sandbox == "bwrap" and not use_bwrap:
            raise HarnessError(f"sandbox=bwrap but bubblewrap is missing or cannot run {device_type} work here; "
                               "install bubblewrap or set sandbox=auto")
        if use_bwrap:
            cmd = bwrap_args(str(scratch), hide, **profile) + cmd
            writable = "the scratch folder and /proc (CUDA needs it here; /proc/sys stays read-only)" \
                if profile["writable_proc"] else "the scratch folder"
            self.protections += ["bwrap: no network", f"bwrap: read-only filesystem outside {writable}"]
        else:
            why = ("sandbox=none" if cfg.sandbox == "none" else "bubblewrap is not installed" if not shutil.which("bwrap")
                   else f"bubblewrap cannot run {device_type} work on this machine")
            self.protections.append(f"no filesystem/network sandbox ({why})")
        self.stderr = open(scratch / "forkserver.log", "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=env, start_new_session=True, text=True, bufsize=1)
        self.lock = threading.Lock()
        ready = self._read(timeout=180)
        if not ready.get("ready"):
            raise HarnessError(f"fork server failed to start; see {scratch / 'forkserver.log'}")

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


class _Conn:
    """A worker's socket with a shared deadline."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline, self.buf = sock, deadline, b""

    def recv(self) -> dict | None:
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
        return json.loads(line)

    def send(self, **msg):
        self.sock.sendall((json.dumps(msg) + "\n").encode())


class Evaluator:
    """Evaluates candidates on one device, one at a time. Use one Evaluator per GPU for parallelism."""

    def __init__(self, cfg: EvalConfig | None = None, *, hide_paths: list[str] | None = None):
        self.cfg = cfg or EvalConfig()
        self._scratch = Path(tempfile.mkdtemp(prefix="kbench-"))
        self._server = _Server(self.cfg, self._scratch, hide_paths or [])
        self._judge_pid = None
        self._judge: _Conn | None = None
        self._lock = threading.Lock()
        self._job_counter = 0
        self._versions = _versions()
        self._device_name = self.cfg.device

    # -- lifecycle --
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._judge_pid:
            _kill_group(self._judge_pid)
        self._server.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def protections(self) -> str:
        return "; ".join(self._server.protections)

    # -- internals --
    def _spawn(self, job: dict, deadline: float) -> tuple[int, _Conn]:
        sock_path = os.path.join(job["job_dir"], "ctl.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock_path)
        listener.listen(1)
        job["socket"] = sock_path
        pid = self._server.call(op="spawn", job=job)["pid"]
        listener.settimeout(max(1.0, min(60.0, deadline - time.monotonic())))
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            _kill_group(pid)
            raise HarnessError(f"worker {job['kind']} never connected; see {job['job_dir']}/worker.log") from None
        finally:
            listener.close()
        return pid, _Conn(conn, deadline)

    def _judge_call(self, **msg) -> dict:
        if self._judge is None:
            job_dir = tempfile.mkdtemp(prefix="judge-", dir=self._scratch)
            self._judge_dir = job_dir
            job = {"kind": "judge", "job_dir": job_dir, "device": self.cfg.device}
            self._judge_pid, self._judge = self._spawn(job, time.monotonic() + 120)
        self._judge.deadline = time.monotonic() + 600
        try:
            self._judge.send(**msg)
            reply = self._judge.recv()
        except OSError:  # broken pipe, or no answer within the deadline
            reply = None
        if reply is None:
            _kill_group(self._judge_pid)
            self._judge = self._judge_pid = None
            raise HarnessError(f"the judge process died: {_tail(Path(self._judge_dir) / 'worker.log', 6)}")
        return reply

    def _seeds(self, trials: int) -> dict:
        base = 1000 * (self.cfg.seed + 1)
        return {
            "init": 42, "model": 43,
            "trials": [base + i for i in range(trials)],
            "timing": [base + 100 + i for i in range(self.cfg.timing_input_sets)],
            "post_timing": base + 999,
        }

    # -- the public call --
    def evaluate(self, problem: Problem, text: str, *, backend: str | None = None) -> EvalResult:
        with self._lock:
            t0 = time.monotonic()
            result = self._evaluate(problem, text, backend or self.cfg.backend)
            result.problem = result.problem or problem.key
            result.device = self._device_name
            result.sandbox = self.protections
            result.versions = self._versions
            result.eval_seconds = round(time.monotonic() - t0, 3)
            if not result.feedback:
                result.feedback = feedback_text(result)
            return result

    def _evaluate(self, problem: Problem, text: str, backend: str) -> EvalResult:
        cfg = self.cfg
        code = extract_code(text)
        if code is None:
            return EvalResult(Status.FORMAT_ERROR, error="no code block found in the response")
        if "ModelNew" not in code:
            return EvalResult(Status.FORMAT_ERROR, error="the code defines no class ModelNew")
        checks: dict = {}
        if cfg.static_checks:
            report = static_check(code, backend)
            checks["static"] = report.violations or "ok"
            if not report.ok:
                status = Status.COMPILE_ERROR if report.reason.startswith("syntax error") else Status.REJECTED
                return EvalResult(status, error=report.reason, checks=checks)
        small = cfg.small if cfg.small is not None else cfg.on_cpu
        if small and not problem.small_sizes and cfg.on_cpu:
            checks["sizes"] = "problem declares no SMALL_SIZES; running at full size on the interpreter"
        sizes = problem.small_sizes if small else {}
        seeds = self._seeds(cfg.trials)
        tolerance = dict(problem.tolerance)
        if cfg.atol is not None:
            tolerance["atol"] = cfg.atol
        if cfg.rtol is not None:
            tolerance["rtol"] = cfg.rtol

        prep = self._judge_call(op="prepare", problem_source=problem.source, sizes=sizes, seeds=seeds)
        self._device_name = prep.get("device_name", self._device_name)
        if not prep.get("ok"):
            return EvalResult(Status.RUNTIME_ERROR, error=f"the reference itself failed: {prep.get('error')}",
                              checks=checks)

        self._job_counter += 1
        job_dir = Path(tempfile.mkdtemp(prefix=f"job{self._job_counter}-", dir=self._scratch))
        candidate_file = job_dir / "candidate.py"
        candidate_file.write_text(code)
        timed = cfg.timing and not cfg.on_cpu
        rng = random.Random()
        job = {
            "kind": "candidate", "job_dir": str(job_dir), "device": cfg.device,
            "problem_source": problem.source, "sizes": sizes, "seeds": seeds,
            "candidate_file": str(candidate_file),
            "allowed_ops": sorted(set(problem.allowed_torch_ops) | set(cfg.allowed_ops)),
            "poison_bytes": prep["output_bytes"],
            "memory_limit_bytes": int(cfg.memory_limit_gb * 2**30) if cfg.on_cpu else 0,
            "timing": {
                "enabled": timed, "mode": cfg.timing_mode, "warmup": cfg.warmup, "iters": cfg.iters,
                "l2_flush_bytes": cfg.l2_flush_mb * 2**20, "baseline": cfg.baseline,
                "input_budget_bytes": cfg.timing_input_gb * 2**30,
                # Four timed calls, unknown to the candidate, whose outputs are checked too.
                "spot_checks": sorted(rng.sample(range(cfg.iters), min(4, cfg.iters))),
            },
        }
        deadline = time.monotonic() + cfg.timeout_s
        pid = None
        try:
            pid, conn = self._spawn(job, deadline)
            return self._drive(conn, pid, job, checks, tolerance)
        except TimeoutError:
            return EvalResult(Status.TIMEOUT, error=f"the candidate did not finish within {cfg.timeout_s:g} s",
                              checks=checks)
        except HarnessError as e:
            return EvalResult(Status.RUNTIME_ERROR, error=str(e), checks=checks)
        finally:
            if pid:
                _kill_group(pid)
                _wait_gone(pid)  # its orphans are re-parented to the fork server only once it is dead
            self._server.call(op="sweep", keep=[self._judge_pid] if self._judge_pid else [])
            shutil.rmtree(job_dir, ignore_errors=True)

    def _drive(self, conn: _Conn, pid: int, job: dict, checks: dict, tolerance: dict) -> EvalResult:
        watchdog = _MemoryWatchdog(pid, self.cfg.memory_limit_gb) if not self.cfg.on_cpu else None
        try:
            timing = None
            compiled = False
            judged: set[str] = set()  # phases whose outputs the judge accepted
            while True:
                msg = conn.recv()
                if watchdog and watchdog.tripped:
                    return EvalResult(Status.RUNTIME_ERROR, compiled=compiled, checks=checks,
                                      error=f"the candidate exceeded the {self.cfg.memory_limit_gb:g} GiB host memory limit")
                if msg is None:
                    return self._died(pid, job, compiled, checks)
                kind = msg.get("type")
                checks.update({k: v for k, v in msg.get("checks", {}).items()})
                if kind == "verdict":  # the worker only ever reports failures; success is the judge's call
                    status = Status(msg["status"])
                    if status == Status.CORRECT:
                        raise HarnessError("a worker claimed a correct verdict; only the judge decides that")
                    return EvalResult(status, compiled=status not in (Status.COMPILE_ERROR, Status.FORMAT_ERROR),
                                      error=msg.get("error", ""), checks=checks)
                elif kind == "outputs":
                    compiled = True
                    if msg.get("timing"):
                        timing = msg["timing"]
                    reply = self._judge_call(op="compare", items=msg["items"], tolerance=tolerance,
                                             job_dir=job["job_dir"])
                    if not reply.get("ok"):
                        return EvalResult(Status.RUNTIME_ERROR, compiled=True, checks=checks,
                                          error=f"could not read the candidate's outputs: {reply.get('error')}")
                    failed = next((r for r in reply["results"] if not r["ok"]), None)
                    checks[f"correctness_{msg['phase']}"] = [
                        {"seed": r["seed"], "ok": r["ok"], **r["stats"]} for r in reply["results"]]
                    if failed:
                        where = "after timing" if msg["phase"] == "post_timing" else "in a correctness trial"
                        return EvalResult(Status.INCORRECT, compiled=True, checks=checks,
                                          error=f"{failed['message']} ({where})")
                    judged.add(msg["phase"])
                    try:
                        conn.send(type="continue")
                    except ConnectionError:
                        return self._died(pid, job, compiled, checks)
                elif kind == "done":
                    # Only phases the judge passed count: a forged early "done" is a rejection.
                    required = {"trials", "post_timing"} if job["timing"]["enabled"] else {"trials"}
                    if not required <= judged:
                        return EvalResult(Status.REJECTED, compiled=compiled, checks=checks,
                                          error="the worker's channel was tampered with (done before the checks ran)")
                    return self._correct(timing, checks)
        finally:
            if watchdog:
                watchdog.stop()

    def _died(self, pid: int, job: dict, compiled: bool, checks: dict) -> EvalResult:
        time.sleep(0.05)
        status = self._server.call(op="exit_status", pid=pid)
        log_tail = _tail(Path(job["job_dir"]) / "worker.log")
        if status.get("signal"):
            name = signal.Signals(status["signal"]).name
            error = f"the candidate process died with {name}"
            if status["signal"] == signal.SIGKILL:
                error += " (killed, e.g. by the memory limit)"
        elif status.get("known"):
            error = f"the candidate process exited with code {status['code']} before finishing"
        else:
            error = "the candidate process closed its channel before finishing"
        if log_tail:
            error += f": {log_tail}"
        return EvalResult(Status.RUNTIME_ERROR, compiled=compiled, error=error[:600], checks=checks)

    def _correct(self, timing: dict | None, checks: dict) -> EvalResult:
        result = EvalResult(Status.CORRECT, compiled=True, correct=True, checks=checks)
        if timing:
            ref, new = _stats(timing["ref_us"]), _stats(timing["new_us"])
            result.runtime_us, result.ref_runtime_us = new.median_us, ref.median_us
            result.runtime_stats, result.ref_runtime_stats = new, ref
            # Median of per-iteration ratios: each pair ran back to back, so clock and thermal drift
            # cancel within the pair instead of adding to the spread of either median.
            ratios = [r / n for r, n in zip(timing["ref_us"], timing["new_us"]) if n > 0]
            result.speedup = round(statistics.median(ratios), 4) if ratios else None
            checks["speedup_of_medians"] = round(ref.median_us / new.median_us, 4) if new.median_us > 0 else None
            result.timing_meaningful = True
        return result


def feedback_text(result: EvalResult) -> str:
    """The specific finding for the model's next turn; kbencheval.prompts.feedback_message frames it."""
    if result.status == Status.CORRECT:
        if result.speedup is not None:
            return f"correct; {result.speedup:.2f}x the reference's speed"
        return "correct; timing is not available on this device"
    hints = {
        Status.REJECTED: " Compute the output in your own kernels, without torch compute ops or tricks.",
        Status.INCORRECT: " Check indexing, masking and the reduction order against the reference.",
        Status.TIMEOUT: " Look for a hang or an unbounded loop.",
    }
    return f"{result.error}{hints.get(result.status, '')}".strip()


def _stats(values: list[float]) -> TimingStats:
    v = sorted(values)
    q = lambda p: v[min(len(v) - 1, int(round(p * (len(v) - 1))))]  # noqa: E731
    return TimingStats(median_us=round(statistics.median(v), 3), mean_us=round(statistics.fmean(v), 3),
                       std_us=round(statistics.pstdev(v), 3), p10_us=round(q(0.1), 3), p90_us=round(q(0.9), 3),
                       n=len(v))


def _kill_group(pid: int):
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pid: int, timeout: float = 3.0):
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.01)


def _tail(path: Path, n: int = 3) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]


class _MemoryWatchdog:
    """Kills a GPU worker whose resident host memory passes the cap (RLIMIT_AS would break CUDA)."""

    def __init__(self, pid: int, limit_gb: float):
        self.pid, self.limit_kb, self.tripped = pid, limit_gb * 2**20, False
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop.wait(0.2):
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
            except (OSError, StopIteration):
                return
            if rss > self.limit_kb:
                self.tripped = True
                _kill_group(self.pid)
                return

    def stop(self):
        self._stop.set()


def _versions() -> dict:
    import platform

    out = {"python": platform.python_version()}
    for mod in ("torch", "triton"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


def evaluate(problem: Problem, text: str, **config) -> EvalResult:
    """One-shot convenience: a fresh Evaluator for one candidate."""
    with Evaluator(EvalConfig(**config)) as ev:
        return ev.evaluate(problem, text)
