"""The untrusted side: a forked worker that imports and runs one candidate.

It imports `ModelNew`, runs it on the trials the harness sends (seeds drawn at run time, sent only
after the model was built), and exports its *outputs*. It never sees a reference output and never
decides a verdict: the judge (kbencheval/eval/trusted/judge.py, a separate trusted process) does. What it
reports can only lower a verdict (a `Failure`); its run-time checks (tripwires.py) are tripwires.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import torch
import torch._dynamo  # noqa: F401  (its import rebinds torch.manual_seed; do it before guarding)

from kbencheval.eval.untrusted.audit import install_for_worker
from kbencheval.eval.sharing.compile_aside import CompileAside
from kbencheval.eval.contract.errors import is_compile_error, short_error
from kbencheval.eval.contract.inputs import (DIGEST_WIDTH, build_model, inputs_fingerprint, load_problem_module,
                                    make_inputs, pin_global_flags, sync)
from kbencheval.eval.contract.protocol import (Assign, CandidateJob, Channel, Failure, OutputItem, Outputs, ProtocolError,
                                      Ready, RunPhase, Status)
from kbencheval.eval.sharing.kernel_cache import FOLDER_ENV, KernelLookup
from kbencheval.eval.sharing.parts import Parts
from kbencheval.eval.contract.transfer import NotPlainOutput, export_tensors, modes, plain_outputs
from kbencheval.eval.untrusted.timed import TimedPhases
from kbencheval.eval.untrusted.recorders import LaunchTracker, OpCapture
from kbencheval.eval.untrusted.tripwires import Tripwires, poison, start_thread_pools


class CandidateWorker(TimedPhases):
    """One candidate, one model instance, phases driven by the harness. Built before its candidate is
    known (the device and the tripwires' hooks are set up then), given it by `take`."""

    def __init__(self, device: str, chan: Channel, clock: dict | None = None):
        self.chan, self.clock = chan, clock if clock is not None else {}
        marks = [time.perf_counter()]  # where the start goes (checks["start_s"]["worker_init_parts_s"])
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.tracker = LaunchTracker()
        self.tracker.install()
        self.compiles = CompileAside(chan, self.device)
        self.compiles.install()
        self.kernels = None  # kernels the harness compiled (kernel_cache.py), where it offers them
        if self.device.type == "cuda" and os.environ.get(FOLDER_ENV):
            self.kernels = KernelLookup(os.environ[FOLDER_ENV])
            self.kernels.install()
        marks.append(time.perf_counter())
        self.checks: dict = {"phases_s": {}}
        self.model = None
        self.take_parts_s: dict | None = None  # where the job's start went (take)
        self.timer = None
        self.profiler_warm = False
        self.exports = self.timed_exports = 0  # names each exported output file uniquely
        # Before the job, not in it (Tripwires starts them too, before its thread count): the first
        # parallel ops' thread pools were most of the job's start (tripwires_s in job_init_parts_s).
        start_thread_pools()
        marks.append(time.perf_counter())
        if self.device.type == "cuda":
            warm_run_time_checks(self.device)
        marks.append(time.perf_counter())
        self.init_parts_s = dict(zip(("hooks_s", "thread_pools_s", "warm_checks_s"),
                                     (round(b - a, 4) for a, b in zip(marks, marks[1:]))))

    def take(self, job: CandidateJob) -> "CandidateWorker":
        clock = [time.perf_counter()]
        self.job = job
        self.module = load_problem_module(job.problem_source, job.sizes)
        clock.append(time.perf_counter())
        self.tripwires = Tripwires(self.tracker, pin_global_flags(), set(job.allowed_ops))
        clock.append(time.perf_counter())
        # Last: from here on the candidate's own code may run. Fresh imports of kbencheval are denied,
        # and none of its modules stays in sys.modules for an `import` to find, except the Triton cache
        # manager, which Triton itself imports by name at its first GPU compile (TRITON_CACHE_MANAGER).
        self.tripwires.audit = install_for_worker(job.job_dir, job.candidate_file)
        triton_manager = os.environ.get("TRITON_CACHE_MANAGER", "").split(":")[0]
        for name in [m for m in sys.modules if m.split(".")[0] == "kbencheval" and m != triton_manager]:
            del sys.modules[name]
        clock.append(time.perf_counter())
        # Where the job's start goes, for the benchmarks (checks["start_s"]); no verdict reads it.
        self.take_parts_s = dict(zip(("problem_module_s", "tripwires_s", "audit_s"),
                                     (b - a for a, b in zip(clock, clock[1:]))))
        return self

    def run(self) -> None:
        if {"forked", "device_up", "locked", "waiting", "assigned"} <= set(self.clock):  # for the benchmarks
            c = self.clock
            self.checks["start_s"] = {"device_init_s": c["device_up"] - c["forked"],
                                      "lock_down_s": c["locked"] - c["device_up"],
                                      "worker_init_s": c["waiting"] - c["locked"],
                                      "waited_for_job_s": c["assigned"] - c["waiting"],
                                      "job_init_s": time.monotonic() - c["assigned"],
                                      "job_init_parts_s": self.take_parts_s,
                                      "worker_init_parts_s": self.init_parts_s}
        if not self.load():
            return
        self.chan.send(Ready(checks=self.checks))
        while True:
            request = self.chan.recv()
            if not isinstance(request, RunPhase):
                raise ProtocolError(f"unexpected {type(request).__name__} from the harness")
            handlers = {"trials": self.run_trials, "timing": self.run_timing, "timing_setup": self.setup_timer,
                        "time_round": self.time_round, "round_checks": self.check_round,
                        "timed_outputs": self.export_timed}
            if request.phase not in handlers:
                raise ProtocolError(f"unknown phase {request.phase!r}")
            self.compiles.in_phase = True
            try:
                if not (self.build() and handlers[request.phase](request)):
                    return
            finally:
                self.compiles.in_phase = False

    def parts(self, phase: str) -> Parts:
        """Where this phase's requests spend their time, added up (checks["worker_parts_s"], for the benchmarks)."""
        return Parts(self.checks.setdefault("worker_parts_s", {}).setdefault(phase, {}))

    def fail(self, status: Status, error: str, trial: str = "") -> bool:
        self.chan.send(Failure(status=status, error=error, trial=trial, checks=self.checks))
        return False

    def load(self) -> bool:
        """Import and compile, no device memory but kernels (ModelNew is built later: `build`); failures are compile errors."""
        clock = time.perf_counter()
        file = self.job.candidate_file
        try:
            spec = importlib.util.spec_from_file_location("candidate_module", file)
            candidate = importlib.util.module_from_spec(spec)
            sys.modules["candidate_module"] = candidate
            spec.loader.exec_module(candidate)
            self.model_cls = candidate.ModelNew
        except BaseException as e:  # candidate code can raise anything, SystemExit included
            if violation := self.tripwires.process_violation():  # e.g. a denied import or socket
                return self.fail(Status.REJECTED, violation)
            return self.fail(Status.COMPILE_ERROR, short_error(e, file))
        self.checks["phases_s"]["load_s"] = time.perf_counter() - clock
        self.precompile(self.model_cls)
        if violation := self.tripwires.process_violation():
            return self.fail(Status.REJECTED, violation)
        if self.device.type == "cuda":
            self.tracker.expected_stream = torch.cuda.current_stream()
        return True

    def build(self) -> bool:
        """ModelNew on the device, once, at the first request: after the memory reservation was admitted."""
        if self.model is not None:
            return True
        clock = time.perf_counter()
        try:
            self.model = build_model(self.model_cls, self.module, self.job.model_seeds, self.device)
        except BaseException as e:  # noqa: BLE001 - its constructor is candidate code
            if violation := self.tripwires.process_violation():
                return self.fail(Status.REJECTED, violation)
            return self.fail(Status.COMPILE_ERROR, short_error(e, self.job.candidate_file))
        if violation := self.tripwires.process_violation():
            return self.fail(Status.REJECTED, violation)
        self.checks["phases_s"]["build_s"] = time.perf_counter() - clock
        return True

    def precompile(self, model_cls) -> None:
        """Compiles the candidate's Triton kernels before its first trial, while its memory reservation
        may still be waiting: ModelNew is built and called once on meta tensors (shapes and dtypes, no
        device memory) with every Triton launch turned into its compile and load (`CompileAside.compiling_only`).
        Nothing of it is judged. Whatever fails here (a forward that reads values, a kernel that does not
        compile, one specialised otherwise on real memory) compiles in the first trial, as before."""
        if self.device.type != "cuda":
            return
        clock, before, loading = time.perf_counter(), self.compiles.count, self.compiles.loading_s
        meta = torch.device("meta")
        try:
            with self.compiles.compiling_only(), torch.no_grad():
                build_model(model_cls, self.module, self.job.model_seeds, meta)(*make_inputs(self.module, 0, meta))
            outcome = "ran"
        except BaseException as e:  # noqa: BLE001 - candidate code; the first trial meets it again
            outcome = f"stopped ({type(e).__name__})"
        self.checks["precompile"] = {"outcome": outcome, "kernels": self.compiles.count - before,
                                     "seconds": round(time.perf_counter() - clock, 3),
                                     "loading_s": round(self.compiles.loading_s - loading, 4),
                                     "launchers": self.compiles.launcher_types}
        if self.kernels is not None:  # hits, and the misses' TTIR for the harness to compile (untrusted)
            self.checks["precompile"].update(kernels_cached=self.kernels.hits, kernel_sources=self.kernels.misses)

    def checked_call(self, inputs: list, parts: Parts) -> tuple[list, str | None]:
        """One forward under every run-time check; returns (outputs, violation or None)."""
        clock = [time.perf_counter()]
        before_inputs = inputs_fingerprint(inputs)  # not a clone: that was a second input set on the device
        capture = OpCapture(set(self.job.allowed_ops))
        self.tracker.reset(capture)
        self.tracker.active = True
        clock.append(time.perf_counter())  # the fingerprint's .tolist() waited for the device
        parts.mark("fingerprint_s")
        before_modes = modes()
        try:
            with torch.no_grad(), capture:
                out = self.model(*inputs)
            sync(self.device)
        finally:
            self.tracker.active = False
        clock.append(time.perf_counter())
        parts.mark("forward_s")
        self.checks.setdefault("launches", []).append(self.tracker.launches)
        try:  # before any method of the returned objects could run
            outs = plain_outputs(out, before_modes)
        except NotPlainOutput as e:
            return [], str(e)
        del out
        violation = self.tripwires.process_violation() or \
            self.tripwires.call_violation(capture, outs, before_inputs, inputs)
        clock.append(time.perf_counter())
        parts.mark("checks_s")
        if "first_call_parts_s" not in self.checks:  # the first call's cost, by part (run_trials)
            self.checks["first_call_parts_s"] = dict(zip(("fingerprint_s", "forward_s", "checks_s"),
                                                          (b - a for a, b in zip(clock, clock[1:]))))
        return outs, violation

    def run_trials(self, request: RunPhase, prefix: str = "") -> bool:
        """Run each requested trial once; export every output for the judge."""
        clock = time.perf_counter()
        parts = self.parts(request.phase)
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()  # outputs of earlier requests, once the judge has let go of them
        parts.mark("ipc_collect_s")
        items = []
        for trial in request.trials:
            self.exports += 1
            # The worker's first trial costs far more than the next ones: where it goes.
            first = self.checks.setdefault("first_trial_parts_s", {}) if self.exports == 1 else None
            try:
                step = time.perf_counter()
                inputs = make_inputs(self.module, trial, self.device)
                poison(self.device, self.job.poison_bytes)
                if first is not None:
                    sync(self.device)
                    first["inputs_s"], step = time.perf_counter() - step, time.perf_counter()
                parts.mark("inputs_s")
                outs, violation = self.checked_call(inputs, parts)
                if first is not None:
                    first["call_s"], step = time.perf_counter() - step, time.perf_counter()
            except BaseException as e:
                if violation := self.tripwires.process_violation():
                    return self.fail(Status.REJECTED, prefix + violation, trial.key)
                status = Status.COMPILE_ERROR if is_compile_error(e) else Status.RUNTIME_ERROR
                return self.fail(status, prefix + short_error(e, self.job.candidate_file), trial.key)
            if violation:
                return self.fail(Status.REJECTED, prefix + violation, trial.key)
            desc = export_tensors(outs, self.job.job_dir, f"{request.phase}{self.exports}")
            if first is not None:
                first["export_s"] = time.perf_counter() - step
            items.append(OutputItem(trial=trial, desc=desc))
            del inputs, outs  # not alive while the next trial's inputs are made: a 3 GB input set twice over
            parts.mark("export_s")
        phases = self.checks["phases_s"]  # trials come one request each: their times add up
        self.checks.setdefault(f"first_{request.phase}_s", time.perf_counter() - clock)  # Triton compiles here
        phases[f"{request.phase}_s"] = phases.get(f"{request.phase}_s", 0.0) + time.perf_counter() - clock
        self.chan.send(Outputs(phase=request.phase, items=items, checks=self.checks))
        return True


def warm_run_time_checks(device: torch.device) -> None:
    """The run-time checks' first use, done before any candidate is known: the inputs' digests (a cuBLAS
    matrix-vector product, so its handle and workspace; a float32-accumulating product for half types)
    and the poison fill, with the torch kernels they load. The first trial paid for them inside its
    memory reservation, an order of magnitude more than the next trials took. An optimisation: if it
    fails (a full device), the first trial does it, and is judged as before."""
    try:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            inputs_fingerprint([torch.ones(2 * DIGEST_WIDTH + 3, dtype=dtype, device=device)])
        poison(device, [1 << 12])
        sync(device)
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError and cuBLAS/driver errors are RuntimeErrors
        print(f"run-time checks not warmed: {type(e).__name__}: {e}", file=sys.stderr)


def run_candidate(job: dict, sock, clock: dict | None = None) -> None:
    """Entry point of a forked candidate worker (kbencheval.eval.processes.forkserver routes it here): sets
    itself up, then waits for its candidate (`Assign`). `clock`: monotonic times of its start (forked,
    device_up, locked; here waiting, assigned), reported in checks["start_s"]."""
    clock = clock if clock is not None else {}
    chan = Channel(sock)
    try:
        worker = CandidateWorker(job["device"], chan, clock)
        clock["waiting"] = time.monotonic()
        assign = chan.recv()
        if not isinstance(assign, Assign):
            raise ProtocolError(f"expected the candidate, got {type(assign).__name__} from the harness")
        clock["assigned"] = time.monotonic()
        worker.take(CandidateJob.from_dict(assign.job)).run()
    except EOFError:
        pass
