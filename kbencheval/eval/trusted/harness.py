"""The evaluator: one call turns an LLM response into a trustworthy `EvalResult`.

    with Evaluator(EvalConfig(device="cpu")) as ev:
        result = ev.evaluate(problem, llm_text)

The harness process never runs candidate code. It starts a pre-warmed fork server (inside
bubblewrap when available), keeps a trusted judge process that owns the reference outputs, forks a
fresh worker per candidate, relays output descriptors from worker to judge, enforces the deadline
and memory cap, and kills the worker's whole process group afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from kbencheval.dataset import Problem
from kbencheval.eval.config import EvalConfig, check_device, timing_grade
from kbencheval.eval.sharing.gate import DeviceGate
from kbencheval.eval.processes.launch import Conn, Launch, Worker
from kbencheval.eval.contract.protocol import CandidateJob, Compare, Prepare, TimingSpec
from kbencheval.eval.result import EvalResult, Status, feedback_text
from kbencheval.eval.contract.errors import clip
from kbencheval.eval.processes.sandbox import reads
from kbencheval.eval.processes.sandbox.env import scrub
from kbencheval.eval.processes.server import HarnessError, _Server, bwrap_args, bwrap_profile, bwrap_works  # noqa: F401
from kbencheval.eval.contract.seeds import RunSeeds, stress_names
from kbencheval.eval.sharing.rounds import timed_outputs_per_request
from kbencheval.eval.trusted.session import Session, SessionHandles
from kbencheval.eval.trusted.timing_checks import gate_window
from kbencheval.eval.sharing.sizing import CUDA_CONTEXT_BYTES, DEVICE_MEMORY_FRACTION, device_bytes_needed
from kbencheval.eval.trusted.screen import screen
from kbencheval.eval.trusted.evaluator_processes import _WHOLE_DEVICE, EvaluatorProcesses

__all__ = ["EvalConfig", "Evaluator", "HarnessError", "RunSeeds", "bwrap_works", "screen", "start_evaluators"]


class Evaluator(EvaluatorProcesses):
    """Evaluates candidates on one device, one at a time. Several Evaluators may share a GPU: their
    correctness work overlaps, and `gate` lets only one of them time at once (kbencheval/eval/sharing/gate.py)."""

    def __init__(self, cfg: EvalConfig | None = None, *, hide_paths: list[str] | None = None,
                 wait_ready: bool = True):
        self.cfg = cfg or EvalConfig()
        self.cfg.validate()
        check_device(self.cfg.device)  # before any process starts
        self._scratch = Path(tempfile.mkdtemp(prefix="kbench-"))
        self._hide = hide_paths or []
        try:
            self._server = _Server(self.cfg, self._scratch, self._hide, wait=wait_ready)
        except BaseException:
            shutil.rmtree(self._scratch, ignore_errors=True)
            raise
        self.gate = DeviceGate(self.cfg.device_index)
        """Shared with every Evaluator on the same physical device: correctness shares it, timing is alone."""
        self.restarts = {"fork_server": 0, "judge": 0}
        """Processes restarted after they died (a candidate's doing, or anything else), over this Evaluator's life."""
        self._judge_pid = self._judge_init = None
        self._judge_kept = 0  # device bytes the judge's allocator held at its last reply
        self._judge_untrimmed = False  # its last reply kept free blocks for more comparisons (Compare.trim)
        self._owner = f"{os.getpid()}-{id(self)}"  # this Evaluator in the device gate's ledger
        self._judge_started = False
        self._judge: Conn | None = None
        self._spare: Worker | None = None  # the next candidate's worker, forked once the last one was gone
        self._lock = threading.Lock()
        self._job_counter = 0
        self._alone = False  # set while a candidate is re-run with the device to itself (see evaluate)
        self._copies_inputs: set[int] = set()  # problems whose timers copy fresh inputs (fresh_inputs.FreshInputs)
        self._versions = _versions()
        self._device_name = self.cfg.device_index
        self._restarted: dict | None = None  # the fork server restarted for the next candidate (checks)

    # -- lifecycle --
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def wait_ready(self) -> None:
        """For `Evaluator(cfg, wait_ready=False)`: blocks until the fork server is up (HarnessError if it failed)."""
        self._server.wait_ready()

    def close(self):
        if self._spare is not None:
            self._spare.kill()
            self._spare = None
        self._kill_judge()
        self.gate.forget(self._owner)
        self._server.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    @property
    def protections(self) -> list[str]:
        """Active protection layers by name, then 'missing NAME: reason' for each layer that could not be had."""
        return self._server.protections + [f"missing {k}: {v}" for k, v in self._server.missing.items()]

    def new_batch_seeds(self) -> RunSeeds:
        """Seeds to share across a batch of candidates (draw them after the candidates were generated)."""
        return RunSeeds.draw(trials=self.cfg.trials, timing_sets=self.cfg.timing_input_sets, seed=self.cfg.seed)

    # -- internals --
    # -- the public call --
    def evaluate(self, problem: Problem, text: str, *, backend: str | None = None,
                 seeds: RunSeeds | None = None) -> EvalResult:
        """One candidate -> verdict. `seeds`: shared by a batch (new_batch_seeds()); default: drawn now."""
        with self._lock:
            t0 = time.monotonic()
            self._ensure_server()  # raises only if the harness cannot run at all
            seeds = seeds or self.new_batch_seeds()
            result = self._evaluate_guarded(problem, text, backend or self.cfg.backend, seeds)
            if isinstance(precompiled := result.checks.get("precompile"), dict):  # the worker's reports: checked there
                if self._server.launchers:
                    self._server.launchers.request(precompiled.get("launchers"))
                sources = precompiled.pop("kernel_sources", None)  # TTIR: too large to keep in a verdict
                if self._server.kernels:
                    self._server.kernels.request(sources)
            if device_out_of_memory(result):
                # The device is shared: other Evaluators' candidates may hold the memory this one needed (honest
                # solutions failed this way with several Evaluators on one GPU). Once more, with the device to itself.
                first = {"error": result.error[:400], "memory_gb": result.checks.get("device_memory_gb"),
                         "ledger": self.gate.counted_gb()}  # what the ledger counted when it failed
                self._alone = True
                try:
                    result = self._evaluate_guarded(problem, text, backend or self.cfg.backend, seeds)
                finally:
                    self._alone = False
                result.checks["device_oom_retry"] = {
                    "why": "re-run with the device to itself after a device out-of-memory error", "first_run": first}
            result.problem = result.problem or problem.key
            result.device = self._device_name
            result.sandbox = self.protections
            result.checks["harness_restarts"] = dict(self.restarts)
            if self._restarted:  # before this candidate: why, and what it cost
                result.checks["harness_restarted"], self._restarted = self._restarted, None
            result.checks.update(self._trust_record())
            result.versions = self._versions
            result.eval_seconds = round(time.monotonic() - t0, 3)
            result.error = clip(scrub(result.error, str(self._scratch)))
            result.feedback = clip(scrub(result.feedback, str(self._scratch)) if result.feedback else feedback_text(result))
            result.checks["reads"] = reads.RULE if "landlock-read" in result.sandbox else "not limited (no Landlock)"
            self._fork_spare()
            return result

    def _trust_record(self) -> dict:
        """What a verdict's numbers and promises are worth here: its timing mode, on the CPU what rests on the
        static allow-list, and the parts of the minimum sandbox the user accepted missing."""
        cfg, record = self.cfg, {}
        if cfg.timing and (not cfg.on_cpu or cfg.timing_on_cpu):
            record["timing_mode"] = timing_grade(cfg.timing_mode)
        if cfg.on_cpu:
            promises = "custom kernels did the work, no tampering with harness objects"
            record["cpu_verdict"] = (f"{promises}: rest on the static allow-list (no device record on the CPU)"
                                     if cfg.static_checks else f"{promises}: rest on in-process tripwires only "
                                     "(static_checks=false, accepted by accept_cpu_tripwires_only)") + \
                "; not on it: outputs crossed as exact plain tensors, read by torch functions captured before the " \
                "candidate loaded (none of its methods ran), and no compiled extension ran (the harness reads the " \
                "worker's memory map: such work cannot be attributed here)"
        if self._server.accepted_missing:
            record["sandbox_weaker"] = {"accepted_missing": self._server.accepted_missing, "by": "sandbox_accept"}
        return record

    def _evaluate_guarded(self, problem: Problem, text: str, backend: str, seeds: RunSeeds) -> EvalResult:
        try:
            return self._evaluate(problem, text, backend, seeds)
        except Exception as e:  # noqa: BLE001 - whatever a candidate broke, it gets a verdict, not an exception
            return EvalResult(Status.RUNTIME_ERROR, error=f"the harness lost a process during this candidate "
                              f"({type(e).__name__}: {e}); it is restarted for the next one")

    def device_share(self, window: dict):
        """The gate for correctness work: shared with the device's other Evaluators, or exclusive while a
        candidate is re-run alone after running out of device memory."""
        return self.gate.exclusive(window) if self._alone else self.gate.shared(window)

    def _evaluate(self, problem: Problem, text: str, backend: str, seeds: RunSeeds) -> EvalResult:
        cfg = self.cfg
        code, static, verdict = screen(text, backend, static_checks=cfg.static_checks)
        checks: dict = {"seeds": seeds.record(), **static}
        if verdict is not None:
            if static:  # the static checks ran: the verdict records them with its seeds
                verdict.checks = checks
            return verdict
        small = cfg.small if cfg.small is not None else cfg.on_cpu
        if small and not problem.small_sizes and cfg.on_cpu:
            checks["sizes"] = "problem declares no SMALL_SIZES; running at full size on the interpreter"
        sizes = problem.small_sizes if small else {}
        stress = stress_names(problem.input_domain) if cfg.stress_trials else []
        trials = seeds.correctness_trials(stress)
        prepare = Prepare(problem_source=problem.source, sizes=sizes, model_seeds=seeds.model, trials=trials)
        with self.device_share(gate_window(checks, "prepare")):
            try:
                prep = self.judge_call(prepare)
            except HarnessError:  # the judge died since the last candidate: once more with a fresh one
                self._ensure_server()
                prep = self.judge_call(prepare)
        if not prep.ok and not self._alone and _OUT_OF_MEMORY.search(prep.error):
            prep = self._prepare_alone(prepare, checks)
        self._device_name = prep.device_name or self._device_name
        if not prep.ok:
            return EvalResult(Status.RUNTIME_ERROR, error=f"the reference itself failed: {prep.error}", checks=checks)
        # Stress trials count only where the reference stays finite.
        trials = [t for t in trials if not t.stress or t.key not in prep.not_finite]
        checks["stress_trials"] = [t.stress for t in trials if t.stress]
        launch = self._launch(problem, code, backend, seeds, sizes, prep.output_bytes)
        if cfg.on_cpu:
            with launch:
                return self._run_candidate(launch, seeds, trials, checks)
        # The candidate runs once its device memory fits beside the others' on this GPU (gate.reserve). Its
        # worker gets its job first, and joins the line for memory only once it has loaded the candidate
        # and compiled its kernels (Ready): seconds of CPU that held the memory before. What it holds
        # meanwhile counts against the others: waiting workers' contexts, counted nowhere, once ran the
        # GPU out of memory beside idle judges.
        problem_key = hash((problem.source, json.dumps(sizes, sort_keys=True)))
        need = device_bytes_needed(prep, cfg, copies_inputs=problem_key in self._copies_inputs)
        capacity = int(DEVICE_MEMORY_FRACTION * (prep.device_total_bytes or need))
        checks["device_memory_gb"] = {"reserved": round(need / 2**30, 2), "capacity": round(capacity / 2**30, 2)}
        if self._alone:  # admitted once every other reservation has ended, and none beside it: the others'
            need = capacity = _WHOLE_DEVICE  # memory, not their work, is what ran it out
        # A spare's context is counted already, in this Evaluator's standing memory (_fork_spare). The worker
        # builds ModelNew only once admitted (worker.build): its weights are not held while it waits.
        early = 0 if launch.worker is not None else CUDA_CONTEXT_BYTES
        with launch, self.gate.reserve(need, capacity, gate_window(checks, "memory"), owner=self._owner,
                                       early_bytes=early, on_queued=launch.start,
                                       ready=launch.reported) as reservation:
            gate_window(checks, "memory").update(worker_started=launch.started, worker_forked=launch.forked)
            try:
                return self._run_candidate(launch, seeds, trials, checks)
            finally:
                if checks.get("fresh_inputs", {}).get("reference", "graph").startswith("copy"):
                    self._copies_inputs.add(problem_key)  # its next reservation counts the copied set
                if sum(prep.output_bytes) + prep.input_bytes > cfg.timing_input_gb * 2**30:
                    self._release_judge()  # a large problem's timer and outputs: not left behind
                # What the judge keeps for the next candidate of this problem counts against the device
                # from now on: idle judges' timers and outputs, counted nowhere, left a new
                # worker's CUDA context no room.
                reservation.standing_after = self._judge_kept + CUDA_CONTEXT_BYTES  # and the spare to come

    def _launch(self, problem, code, backend, seeds, sizes, output_bytes) -> Launch:
        """The candidate's job, for the spare worker (or, if there is none, one forked at `Launch.start`)."""
        cfg = self.cfg
        job = CandidateJob(
            job_dir="", device=cfg.device_index, problem_source=problem.source, sizes=sizes,
            model_seeds=seeds.model, candidate_file="",
            allowed_ops=sorted(set(problem.allowed_torch_ops) | set(cfg.allowed_ops)), backend=backend,
            poison_bytes=output_bytes,
            memory_limit_bytes=int(cfg.memory_limit_gb * 2**30) if cfg.on_cpu else 0,
            timing=TimingSpec(enabled=cfg.timing and (not cfg.on_cpu or cfg.timing_on_cpu), mode=cfg.timing_mode,
                              warmup=cfg.warmup, iters=cfg.iters, min_iters=cfg.min_iters,
                              target_rse=cfg.timing_target_rse, l2_flush_bytes=cfg.l2_flush_mb * 2**20,
                              baseline=cfg.baseline, input_budget_bytes=int(cfg.timing_input_gb * 2**30),
                              outputs_per_request=timed_outputs_per_request(sum(output_bytes))))
        tolerance = dict(problem.tolerance)
        tolerance.update({k: v for k, v in (("atol", cfg.atol), ("rtol", cfg.rtol)) if v is not None})
        spare, self._spare = self._spare, None
        return Launch(self.forks, job, code, tolerance, spare)

    def _run_candidate(self, launch: Launch, seeds: RunSeeds, trials: list, checks: dict) -> EvalResult:
        """Runs the candidate's session; its worker was given its job before its memory reservation, or
        starts now. Its start (load, compile) had cfg.timeout_s, and from here it has cfg.timeout_s again:
        the wait for memory is not the candidate's time."""
        cfg, job = self.cfg, launch.job
        try:
            if launch.started is None:
                launch.start()
            if launch.error is not None:
                raise launch.error
            if time.monotonic() < launch.conn.deadline:  # a start that ran past its deadline times out now
                launch.conn.deadline = time.monotonic() + cfg.timeout_s
            handles = SessionHandles(cfg=cfg, gate=self.gate, device_share=self.device_share, judge=self.judge_call,
                                     exit_status=lambda pid: self._server.call(op="exit_status", pid=pid))
            return Session(handles, launch.conn, launch.pid, job, checks, launch.tolerance).run(trials, seeds,
                                                                                                launch.started)
        except TimeoutError:
            return EvalResult(Status.TIMEOUT, error=f"the candidate did not finish within {cfg.timeout_s:g} s",
                              checks=checks)
        except HarnessError as e:
            return EvalResult(Status.RUNTIME_ERROR, error=str(e), checks=checks)
        finally:
            ended = time.monotonic()
            launch.end()
            checks.setdefault("harness_s", {})["teardown"] = {"worker_s": round(time.monotonic() - ended, 4),
                                                              "judge_s": 0.0}
            if self._judge_untrimmed:  # it ended before its last comparison, which gives the free blocks back
                self._release_judge(keep_problem=True)


# The allocator's and the driver's words, and cuBLAS/cuDNN failing to allocate a handle's workspace (an honest
# Linear got CUBLAS_STATUS_ALLOC_FAILED on a GPU shared by many Evaluators).
_OUT_OF_MEMORY = re.compile(r"(CUDA|HIP)( error:)? out of memory|(CU|HIP)BLAS_STATUS_ALLOC_FAILED|"
                            r"(CU|MI)DNN_STATUS_ALLOC_FAILED")


def device_out_of_memory(result: EvalResult) -> bool:
    """A runtime error from torch's CUDA allocator or the driver ("CUDA error: out of memory", e.g. a
    context created on a full device), the candidate's or the judge's; not the host's."""
    return result.status == Status.RUNTIME_ERROR and _OUT_OF_MEMORY.search(result.error or "") is not None


def _versions() -> dict:
    import platform

    out = {"python": platform.python_version()}
    for mod in ("torch", "triton"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


def start_evaluators(cfg: EvalConfig, count: int) -> list[Evaluator]:
    """`count` Evaluators whose fork servers boot side by side: each start waits on the server's imports
    and device init, so starting them one after another held the first reward step up for the sum of
    their starts. The servers are started from the calling thread, not a thread pool: a fork server dies
    with the thread that started it (PDEATHSIG). If any fails to start, all are closed and its error
    is raised."""
    evaluators: list[Evaluator] = []
    try:
        for _ in range(count):
            evaluators.append(Evaluator(cfg, wait_ready=False))
        for ev in evaluators:
            ev.wait_ready()
    except BaseException:
        for ev in evaluators:
            ev.close()
        raise
    return evaluators
