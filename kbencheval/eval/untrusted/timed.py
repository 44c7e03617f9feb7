"""A candidate worker's timing phases: eager timing (KernelBench-style, untrusted numbers) and the
trusted mode's rounds, whose figures the harness bounds from outside and whose timed outputs the judge
checks. Untrusted side: runs in the candidate's process (a part of worker.CandidateWorker)."""

from __future__ import annotations

import functools
import time

import torch

from kbencheval.eval.contract.errors import short_error
from kbencheval.eval.contract.inputs import build_model
from kbencheval.eval.contract.protocol import OutputItem, Outputs, RunPhase, Status
from kbencheval.eval.contract.timing import Timer, profiled_report, time_models
from kbencheval.eval.contract.transfer import NotPlainOutput, export_tensors, modes, plain_outputs
from kbencheval.eval.untrusted.tripwires import os_thread_count


class TimedPhases:
    """CandidateWorker's timing phases (run_timing; setup_timer, time_round, check_round, export_timed)."""

    def run_timing(self, request: RunPhase) -> bool:
        """Eager timing inside this process (untrusted numbers), then the post-timing trials."""
        clock = time.perf_counter()
        job = self.job
        self.give_back_free_blocks()
        try:
            if self.device.type == "cuda" and job.timing.mode == "events":
                self.warm_profiler()  # time_models profiles one call of the candidate
            ref_model = build_model(self.module.Model, self.module, job.model_seeds, self.device)
            if job.timing.baseline == "compile":
                ref_model = torch.compile(ref_model)
            timing = time_models(ref_model, self.model, self.module, self.device, job.timing,
                                 request.timing_trials, spot=set(request.spot_checks))
        except BaseException as e:
            return self.fail(Status.RUNTIME_ERROR, "during timing: " + short_error(e, job.candidate_file))
        self.checks["phases_s"]["timed_loop_s"] = time.perf_counter() - clock
        spot = timing.pop("spot_outputs")
        if not self.run_trials(RunPhase(phase="timing", trials=request.trials), prefix="after timing: "):
            return False
        # The spot-checked timed outputs follow as a second message of the same phase.
        items = [OutputItem(trial=trial, desc=export_tensors(outs, job.job_dir, f"spot{k}"))
                 for k, (trial, outs) in enumerate(spot)]
        self.chan.send(Outputs(phase="timing_spot", items=items, checks=self.checks, timing=timing))
        return True

    # -- trusted timing: the harness bounds these figures from outside and checks timed outputs --

    def eager_call(self, call):
        """A model that could not be captured runs eagerly: launches are tracked (stream check) meanwhile."""
        self.tracker.reset(None)
        self.tracker.active = True
        try:
            return call()
        finally:
            self.tracker.active = False

    def give_back_free_blocks(self) -> None:
        """The trials' blocks, kept from one trial to the next (each reuses them: freeing them after every
        trial cost milliseconds, and the next trial allocated them again), go back before
        the timer is built: its CUDA graphs allocate from pools of their own, and the candidate's
        reservation counts one set of buffers, not both."""
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()  # the last trial's exported outputs, which the judge has let go of
            torch.cuda.empty_cache()

    def setup_timer(self, request: RunPhase) -> bool:
        """Builds the timer; on GPUs the reply lists the kernels that the timed work runs on the device
        (the harness decides whether they are the candidate's: device_kernels.kernel_violation)."""
        self.give_back_free_blocks()
        try:
            self.timer = Timer(self.model, self.module, self.device, self.job.timing, request.timing_trials[0],
                               on_eager_call=self.eager_call, parts=self.parts(request.phase),
                               as_outputs=functools.partial(plain_outputs, modes_before=modes()), check_replay=True)
            timing = {"mechanism": self.timer.mechanism, "fresh_inputs": self.timer.fresh.mechanism}
            if self.device.type == "cuda":
                timing["device_kernels"] = self.timer.device_kernels or self.profiled_call()
        except BaseException as e:
            if violation := self.tripwires.process_violation() or not_plain(e):  # e.g. a thread denied inside forward
                return self.fail(Status.REJECTED, "preparing timing: " + violation)
            return self.fail(Status.RUNTIME_ERROR, "preparing timing: " + short_error(e, self.job.candidate_file))
        self.checks["timing_mechanism"] = self.timer.mechanism
        self.chan.send(Outputs(phase=request.phase, items=[], checks=self.checks, timing=timing))
        return True

    def profiled_call(self) -> dict:
        """One more eager call of a model that was not captured, its device kernels recorded by the profiler."""
        self.warm_profiler()
        return profiled_report(self.timer._call)

    def warm_profiler(self) -> None:
        """CUPTI starts threads of its own at the profiler's first use: start them with no candidate code
        running and count them as the worker's, so that the thread check does not blame the candidate."""
        if self.profiler_warm:
            return
        self.profiler_warm = True
        before = os_thread_count()
        profiled_report(lambda: torch.zeros(1, device=self.device))  # a failure shows in the real report
        self.tripwires.threads += max(0, os_thread_count() - before)

    def time_round(self, request: RunPhase) -> bool:
        clock = time.perf_counter()
        try:
            times, digests = self.timer.run(request.timing_trials, digest_seed=request.digest_seed)
        except BaseException as e:
            if violation := not_plain(e):
                return self.fail(Status.REJECTED, "during timing: " + violation)
            return self.fail(Status.RUNTIME_ERROR, "during timing: " + short_error(e, self.job.candidate_file))
        self.checks["phases_s"]["timed_loop_s"] = self.checks["phases_s"].get("timed_loop_s", 0.0) + \
            time.perf_counter() - clock
        if self.device.type == "cuda":  # the worker's own report, for sizing shared GPUs; never a verdict input
            self.checks["worker_peak_gb"] = round(torch.cuda.max_memory_reserved(self.device) / 2**30, 3)
        # The tripwire checks run after the rounds (check_round, export_timed): here they would sit inside
        # the harness's wall clock (milliseconds of process checks), which the reference's round lacks.
        self.chan.send(Outputs(phase=request.phase, items=[], checks=self.checks,
                               timing={"new_us": times, "digests": digests}))
        return True

    def timing_violation(self) -> str | None:
        return self.tripwires.process_violation() or \
            ("a kernel was launched on a side stream" if self.tracker.stream_violations else None)

    def check_round(self, request: RunPhase) -> bool:
        """After each round of a model timed eagerly: the tripwires, then one more call under the profiler,
        which the candidate cannot tell from a timed one by counting (one that switches to library
        kernels after N calls is seen). A captured graph runs no candidate code in a round."""
        if violation := self.timing_violation():
            return self.fail(Status.REJECTED, "during timing: " + violation)
        try:
            timing = {"device_kernels": self.profiled_call()} if self.device.type == "cuda" else None
        except BaseException as e:
            if violation := self.tripwires.process_violation():
                return self.fail(Status.REJECTED, "during timing: " + violation)
            return self.fail(Status.RUNTIME_ERROR, "during timing: " + short_error(e, self.job.candidate_file))
        if violation := self.tripwires.process_violation():
            return self.fail(Status.REJECTED, "during timing: " + violation)
        self.chan.send(Outputs(phase=request.phase, items=[], checks=self.checks, timing=timing))
        return True

    def export_timed(self, request: RunPhase) -> bool:
        """The tripwire checks, then the outputs of the timed iterations the harness picked, recomputed as
        the timed loop computed them. The judge holds each to the digest sent inside its round. The checks
        before the first cover the rounds; before a later one, no candidate code ran since the last."""
        if not self.timed_exports and (violation := self.timing_violation()):
            return self.fail(Status.REJECTED, "during timing: " + violation)
        items, parts = [], self.parts(request.phase)
        if self.device.type == "cuda":
            torch.cuda.ipc_collect()  # the copies of earlier requests, once the judge has let go of them
        parts.mark("ipc_collect_s")
        for n, trial in enumerate(request.trials):
            try:
                outs = self.timer.output_for(trial)
                parts.mark("recompute_s")
            except BaseException as e:
                if violation := self.tripwires.process_violation() or not_plain(e):
                    return self.fail(Status.REJECTED, "recomputing a timed output: " + violation)
                return self.fail(Status.RUNTIME_ERROR, "recomputing a timed output: " +
                                 short_error(e, self.job.candidate_file))
            if n < len(request.trials) - 1:
                outs = [t.clone() for t in outs]  # the next call overwrites a graph's static outputs
            self.exports += 1
            self.timed_exports += 1
            items.append(OutputItem(trial=trial, desc=export_tensors(outs, self.job.job_dir, f"timed{self.exports}")))
            parts.mark("export_s")
        if violation := self.timing_violation():
            return self.fail(Status.REJECTED, "during timing: " + violation)
        parts.mark("checks_s")
        self.chan.send(Outputs(phase=request.phase, items=items, checks=self.checks))
        return True


def not_plain(e: BaseException) -> str | None:
    """The reason, where a timed call returned something other than plain tensors (transfer.plain_outputs)."""
    return str(e) if isinstance(e, NotPlainOutput) else None
