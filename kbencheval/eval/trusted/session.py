"""One candidate's evaluation as the harness drives it: ask the worker, relay to the judge, decide.

Trusted code (runs in the harness process). The worker's messages are typed (protocol.py); anything
but the answer to the current request is protocol abuse and the candidate is `rejected`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import signal
import time
from pathlib import Path
from typing import Callable

from kbencheval.eval.contract.errors import clip, last_exception_line, tail
from kbencheval.eval.sharing.parts import add_parts
from kbencheval.eval.processes.lifecycle import MemoryWatchdog
from kbencheval.eval.contract.protocol import (CandidateJob, Compare, Compiled, Compiling, Failure, Outputs, ProtocolError,
                                      Ready, Resume, RunPhase, Trial)
from kbencheval.eval.result import EvalResult, Status
from kbencheval.eval.contract.seeds import RunSeeds
from kbencheval.eval.trusted.timing_checks import TimingChecks, Verdict, correct_result, gate_window

# Checks the harness writes. A worker's message may add its own (phases_s, launches, timing_mechanism)
# but never these, nor correctness_*: they are the record a user reads, not the candidate's to write.
HARNESS_KEYS = frozenset({"seeds", "static", "sizes", "stress_trials", "timing_rounds", "timing_trust",
                          "device_kernels", "reference_kernels", "physical_floor_us", "speedup_of_medians",
                          "device_gate", "harness_restarts", "harness_restarted", "served_by", "device_oom_retry",
                          "judge_reserved_gb", "harness_s", "compiles_aside", "fresh_inputs",
                          "prepare_oom_retry", "judge_parts_s", "timing_mode", "cpu_verdict", "sandbox_weaker",
                          "timing_path"})


@dataclasses.dataclass(frozen=True)
class SessionHandles:
    """What a Session may use of its Evaluator, and nothing more: not its processes, caches or counters."""

    cfg: object  # EvalConfig
    gate: object  # the device's DeviceGate: timing takes it alone
    device_share: Callable  # window -> the gate for correctness work (shared, or alone after an OOM)
    judge: Callable  # a typed request (protocol.py) -> the judge process's reply
    exit_status: Callable  # pid -> how the fork server saw that worker end


class Session(TimingChecks):
    """One candidate's conversation: the harness asks, the worker answers, the judge decides.

    Nothing the worker sends can make a verdict `correct` on its own: the verdict is `correct` only
    when every phase the harness requested was answered with exactly the requested items and the
    judge passed them all. Any other message is protocol abuse (`rejected`).
    """

    def __init__(self, handles: SessionHandles, conn, pid: int, job: CandidateJob, checks: dict, tolerance: dict):
        self.handles, self.conn, self.pid, self.job, self.checks, self.tolerance = handles, conn, pid, job, checks, tolerance
        self.spent = self.checks["harness_s"] = {}  # per phase: seconds waiting on the worker and on the judge
        self.compiled = False
        self.requested: list[Trial] = []
        self.asked_at = 0.0  # when the pending request was sent
        self.kernels: dict = {}  # what the timed work ran, as the harness read it (checks["device_kernels"])
        self.watchdog = None

    def run(self, trials: list[Trial], seeds: RunSeeds, started: float | None = None) -> EvalResult:
        """`started`: when the worker's fork was requested (its start, until Ready, is `harness_s["start"]`)."""
        cfg = self.handles.cfg
        self.watchdog = MemoryWatchdog(self.pid, cfg.memory_limit_gb) if not cfg.on_cpu else None
        timed = self.job.timing.enabled  # more of this candidate's outputs follow the trials
        try:
            self.expect(Ready)
            self.add_spent("start", "worker_s", time.monotonic() if started is None else started)
            self.compiled = True
            self.run_trials(trials, trim=not timed)
            if not timed:
                return EvalResult(Status.CORRECT, compiled=True, correct=True, checks=self.checks)
            if self.job.timing.mode == "trusted":
                return self.trusted_timing(seeds)  # holds the device alone only while it measures
            with self.handles.gate.exclusive(gate_window(self.checks, "timing")):
                return self.eager_timing(seeds)
        except ProtocolError as e:
            return EvalResult(Status.REJECTED, compiled=self.compiled, checks=self.checks,
                              error=f"the worker broke the evaluation protocol: {e}")
        except Verdict as v:
            return v.result
        finally:
            if self.watchdog:
                self.watchdog.stop()

    def run_trials(self, trials: list[Trial], trim: bool) -> None:
        """One trial per request: the worker and the judge each hold one trial's tensors, not all of them
        (several Evaluators on one GPU ran it out of memory that way). The judge compares a trial while the worker runs
        the next: the worker then holds the trial it runs and the one being judged, as its reservation
        counts (sizing.device_bytes_needed: a call's peak and one exported output). The device is shared
        per trial, so a timer waiting for it waits for one trial of each, not for all of them."""
        judged: tuple[Outputs, list[Trial]] | None = None  # the last trial's outputs, not yet judged
        for trial in trials:  # Triton compiles in the first, on first call, with the device let go
            with self.handles.device_share(gate_window(self.checks, "trials")) as hold:
                self.request(RunPhase(phase="trials", trials=[trial]))
                if judged is not None:
                    self.judge(*judged, trim=False)
                judged = (self.answer("trials", hold), [trial])
        if judged is not None:
            with self.handles.device_share(gate_window(self.checks, "trials")):
                self.judge(*judged, trim=trim)

    def eager_timing(self, seeds: RunSeeds) -> EvalResult:
        """KernelBench-style timing in the worker; four timed calls, unknown to the candidate until now,
        and a post-timing trial are checked by the judge."""
        spot = sorted(random.SystemRandom().sample(range(self.handles.cfg.iters), min(4, self.handles.cfg.iters)))
        post = self.ask(RunPhase(phase="timing", trials=list(seeds.post_timing),
                                 timing_trials=list(seeds.timing), spot_checks=spot))
        self.judge(post, where="after timing")
        spot_outputs = self.expect(Outputs, "timing_spot")
        if len(spot_outputs.items) > len(spot) or any(i.trial not in seeds.timing for i in spot_outputs.items):
            raise ProtocolError("spot-checked outputs for inputs that were not timed")
        self.judge(spot_outputs, expected=[i.trial for i in spot_outputs.items], where="in a timed call")
        self.check_device_kernels(spot_outputs)
        return correct_result(spot_outputs.timing, self.checks)

    def ask(self, request: RunPhase, hold=None) -> Outputs:
        """Sends `request` and returns the worker's outputs. `hold`: the phase's place on the device
        (gate.Hold), let go while the worker compiles; without one (the exclusive timing) it is kept."""
        self.request(request)
        return self.answer(request.phase, hold)

    def request(self, request: RunPhase) -> None:
        """`ask` in two steps, for work done meanwhile: the request, then its `answer`."""
        self.requested = list(request.trials)
        self.asked_at = time.monotonic()
        self.send(request)

    def answer(self, phase: str, hold=None) -> Outputs:
        try:
            while isinstance(reply := self.expect((Outputs, Compiling), phase), Compiling):
                self.compile_aside(hold)
            if self.handles.cfg.on_cpu:
                self.check_compiled_code()
            return reply
        finally:
            self.add_spent(phase, "worker_s", self.asked_at)

    def check_compiled_code(self) -> None:
        """On the CPU, machine code the candidate built (a load_inline or ctypes library, mapped executable
        from its job folder, a deleted file or a memfd) ran beneath every recorder: it can call torch's own
        kernels, and with no device record nothing tells its work from theirs. Such a verdict is never
        `correct` there. Read by the harness from the kernel's map of the worker, not from the worker."""
        if found := compiled_code(self.pid, self.job.job_dir):
            raise Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                f"the candidate ran machine code it compiled ({found}): on the CPU the work of a compiled "
                "extension cannot be attributed to it (no device record), so it is judged only on a GPU: "
                "evaluate backend=cuda candidates with device=cuda")))

    def send(self, msg) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            raise Verdict(self.died()) from None

    def compile_aside(self, hold) -> None:
        """The worker compiles on the CPU: the device is let go meanwhile (no timer waits for a compile),
        taken back behind any waiting timer before it may launch. Lying gains only the gate's known limit."""
        clock = time.monotonic()
        with hold.stepped_aside() if hold else contextlib.nullcontext():
            self.expect(Compiled)
        aside = self.checks.setdefault("compiles_aside", {"count": 0, "seconds": 0.0, "device_let_go": 0})
        aside["count"] += 1
        aside["seconds"] = round(aside["seconds"] + time.monotonic() - clock, 4)
        aside["device_let_go"] += hold is not None
        self.send(Resume())

    def add_spent(self, phase: str, side: str, since: float) -> None:
        spent = self.spent.setdefault(phase, {"worker_s": 0.0, "judge_s": 0.0})
        spent[side] = round(spent[side] + time.monotonic() - since, 4)

    def expect(self, cls, phase: str = ""):
        """The next message must be `cls` (for `phase`); a Failure ends the evaluation with its status."""
        msg = self.conn.recv()
        if self.watchdog and self.watchdog.tripped:
            raise Verdict(EvalResult(Status.RUNTIME_ERROR, compiled=self.compiled, checks=self.checks,
                                      error=f"the candidate exceeded the {self.handles.cfg.memory_limit_gb:g} GiB "
                                            "host memory limit"))
        if msg is None:
            raise Verdict(self.died())
        if isinstance(msg, (Ready, Failure, Outputs)):
            self.checks.update({k: v for k, v in msg.checks.items()
                                if k not in HARNESS_KEYS and not k.startswith("correctness_")})
        if isinstance(msg, Failure):  # the worker only ever reports failures; success is the judge's call
            compiled = msg.status not in (Status.COMPILE_ERROR, Status.FORMAT_ERROR)
            raise Verdict(EvalResult(msg.status, compiled=compiled, error=clip(msg.error), checks=self.checks))
        if not isinstance(msg, cls) or (phase and isinstance(msg, Outputs) and msg.phase != phase):
            got = msg.type + (f" for phase {msg.phase}" if isinstance(msg, Outputs) else "")
            names = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
            raise ProtocolError(f"expected {names}{f' for phase {phase}' if phase else ''}, got {got}")
        return msg

    def judge(self, outputs: Outputs, expected: list[Trial] | None = None, where: str = "in a correctness trial",
              committed: list | None = None, digest_seeds: list[int] | None = None, trim: bool = True):
        """The judge compares; it also refuses items other than exactly those requested, and timed outputs
        whose digests are not the `committed` ones (one per item, with its `digest_seeds`). `trim=False`
        while more outputs follow."""
        expected = self.requested if expected is None else expected
        clock = time.monotonic()
        reply = self.handles.judge(Compare(job_dir=self.job.job_dir, phase=outputs.phase, tolerance=self.tolerance,
                                            expected=expected, items=outputs.items,
                                            committed=committed, digest_seeds=digest_seeds, trim=trim))
        self.add_spent(outputs.phase, "judge_s", clock)
        add_parts(self.checks.setdefault("judge_parts_s", {}).setdefault(outputs.phase, {}), reply.parts_s)
        if not reply.ok:
            raise Verdict(EvalResult(Status.RUNTIME_ERROR, compiled=True, checks=self.checks,
                                     error=f"could not read the candidate's outputs: {reply.error}"))
        if reply.protocol_error:
            raise ProtocolError(reply.protocol_error)
        # Appended, not replaced: timed outputs are judged once per round, and every round is on record.
        self.checks.setdefault(f"correctness_{outputs.phase}", []).extend(
            {"trial": r.trial, "ok": r.ok, **r.stats} for r in reply.results)
        if failed := next((r for r in reply.results if not r.ok), None):
            raise Verdict(EvalResult(Status.INCORRECT, compiled=True, checks=self.checks,
                                     error=f"{failed.message} ({where}, inputs {failed.trial})"))

    def died(self) -> EvalResult:
        time.sleep(0.05)
        status = self.handles.exit_status(self.pid)
        log_tail = tail(Path(self.job.job_dir) / "worker.log")
        if status.get("signal"):
            error = f"the candidate process died with {signal.Signals(status['signal']).name}"
            if status["signal"] == signal.SIGKILL:
                error += " (killed, e.g. by the memory limit)"
        elif status.get("known"):
            error = f"the candidate process exited with code {status['code']} before finishing"
        else:
            error = "the candidate process closed its channel before finishing"
        # The exception's own line first: torch's CUDA errors end in three lines of advice that a
        # tail alone would keep instead of "CUDA error: out of memory".
        raised = last_exception_line(Path(self.job.job_dir) / "worker.log")
        if raised and raised not in log_tail:
            log_tail = f"{raised} | {log_tail}"
        if log_tail:
            error += f": {log_tail}"
        return EvalResult(Status.RUNTIME_ERROR, compiled=self.compiled, error=error[:600], checks=self.checks)


def compiled_code(pid: int, job_dir: str) -> str:
    """'' unless process `pid` maps executable code from where a candidate can write: its job folder (a
    file there deleted since included), a memfd or /dev/shm. Else which kind (not its path: no channel)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read(1 << 24)
    except PermissionError:  # the harness reads its own workers' maps; one that hides it is not judged blind
        return "a process whose memory map the harness cannot read"
    except OSError:
        return ""  # the worker is gone: its verdict is its death's
    folder = str(Path(job_dir).resolve()).rstrip("/") + "/"
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or "x" not in fields[1]:
            continue
        path = fields[5]
        if path.startswith(folder) or path.startswith(job_dir.rstrip("/") + "/"):
            return "a library in its job folder"
        if path.startswith(("/memfd:", "/dev/shm/")):
            return "an in-memory library"
    return ""
