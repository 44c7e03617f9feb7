"""The trusted judge: reference model, reference outputs, and the comparison that decides correctness
(compare.py).

A long-lived process forked from the same pre-warmed server as the workers, but one that never
imports candidate code. It computes reference outputs (cached per problem and trial), and for each
phase demands exactly the items it asked for: every trial once, the reference's number of outputs,
their shapes and dtypes. Anything else fails the candidate.
"""

from __future__ import annotations

import dataclasses
import json

import torch

from kbencheval.eval.trusted import judge_kernels
from kbencheval.eval.contract.errors import short_error
from kbencheval.eval.contract.inputs import (as_tensor_list, build_model, device_name, digest_bounds_queued, digests_match,
                                    load_problem_module, make_inputs, output_digest, pin_global_flags, sync)
from kbencheval.eval.sharing.parts import Parts
from kbencheval.eval.contract.protocol import (Channel, Compare, JudgeJob, Prepare, ProtocolError, Release,
                                               TimeReference, Trial, judge_keeps_outputs)
from kbencheval.eval.contract.judge_replies import (REPLIES, Compared, JudgeReply, Prepared, ReferenceTimed,
                                                    TrialVerdict, encode_reply)
from kbencheval.eval.contract.timing import Timer, measure_bandwidth_gbs
from kbencheval.eval.contract.transfer import import_tensors
from kbencheval.eval.trusted.compare import Readback, check_items, queue_outputs, verdicts


class Judge:
    def __init__(self, device: torch.device, cache_bytes: int = 8 << 30):
        self.device, self.cache_bytes = device, cache_bytes
        self.key = None
        self.module = self.model = None
        self.refs: dict[Trial, list] = {}
        self.timer, self.timer_key = None, None
        self.timer_eager = False  # the timer runs the reference as reference() does (not torch.compile'd)
        self.bandwidth_gbs = None
        self.input_bytes = 0  # of the last trial computed (every trial of a problem has the same shapes)

    def prepare(self, msg: Prepare) -> Prepared:
        key = (msg.problem_source, json.dumps(msg.sizes, sort_keys=True), json.dumps(msg.model_seeds, sort_keys=True))
        if self.key != key:
            self.refs.clear()
            self.model = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.timer = self.timer_key = None
            self.module = load_problem_module(msg.problem_source, msg.sizes)
            self.model = build_model(self.module.Model, self.module, msg.model_seeds, self.device)
            self.key = key
        not_finite, output_bytes, call_peak = [], [], 0
        for n, trial in enumerate(msg.trials):
            measure = n == 0 and self.device.type == "cuda"  # one call, inputs to outputs: sizes the reservation
            if measure:
                sync(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
                baseline = torch.cuda.memory_allocated(self.device)
            out = self.reference(trial)
            if measure:
                call_peak = torch.cuda.max_memory_allocated(self.device) - baseline
            if any(isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())
                   for t in out):
                not_finite.append(trial.key)
            output_bytes = [t.numel() * t.element_size() for t in out if isinstance(t, torch.Tensor)]
        reply = Prepared(device_name=device_name(self.device), output_bytes=output_bytes,
                         input_bytes=self.input_bytes, not_finite=not_finite)
        if self.device.type == "cuda":
            reply.call_peak_bytes = call_peak
            reply.model_bytes = sum(t.numel() * t.element_size()
                                    for t in [*self.model.parameters(), *self.model.buffers()])
            reply.device_total_bytes = torch.cuda.get_device_properties(self.device).total_memory
        self.release_memory()
        reply.reserved_bytes = self.kept()
        return reply

    def release(self, msg: Release) -> JudgeReply:
        """Drops the problem's timer and cached outputs: after a large candidate, an idle judge would
        otherwise keep gigabytes that no reservation accounts for. `keep_problem`: the free blocks only."""
        if msg.keep_problem:
            self.release_memory()
            return JudgeReply(reserved_bytes=self.kept())
        self.refs.clear()
        self.timer = self.timer_key = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return JudgeReply(reserved_bytes=self.kept())

    def kept(self) -> int | None:
        """What this judge's allocator holds on the device: between candidates, its cached outputs and
        timer, which the device gate counts as standing memory (gate.DeviceGate.reserve). None off CUDA."""
        return torch.cuda.memory_reserved(self.device) if self.device.type == "cuda" else None

    def compare(self, msg: Compare) -> Compared:
        """Every item's comparison (and a timed output's digest and its bounds) is queued on the device
        and read back once per request; the items' verdicts are then taken in order, up to the first wrong
        one. The candidate's memory stays mapped until that read: releasing a CUDA IPC tensor waits for
        the device too (torch syncs its stream first), and with nothing queued that wait is short."""
        if wrong := check_items(msg.expected, msg.items):
            return Compared(protocol_error=wrong)
        timed = msg.committed is not None
        if timed:  # each item is held to its own round's digest: in the order asked
            if [item.trial for item in msg.items] != msg.expected:
                return Compared(protocol_error="the worker returned the timed outputs in another order than requested")
            commitments = list(zip(msg.committed, msg.digest_seeds or [], strict=True))
        parts = Parts()  # where a comparison's time goes (checks["judge_parts_s"]); no extra syncs
        readback, mapped, queued = Readback(), [], []
        for n, item in enumerate(msg.items):
            got = import_tensors(item.desc, msg.job_dir)
            mapped.append(got)
            parts.mark("import_s")
            if timed:
                # One snapshot in the judge's memory: the worker's process lives on while it is read, so
                # the comparison and the digest must not see two different versions of its buffer.
                got = [t.clone() if isinstance(t, torch.Tensor) else t for t in got]
                parts.mark("snapshot_s")
            ref = self.timed_reference(item.trial) if msg.phase == "timed_outputs" else self.reference(item.trial)
            parts.mark("reference_s")
            checks = queue_outputs(ref, got, msg.tolerance, bool(item.trial.stress))
            slots = [readback.add(check.numbers) for check in checks]
            parts.mark("compare_s")
            # Only for outputs laid out as the reference's (the digest of another dtype would be a copy).
            digest = (readback.add(output_digest(got, commitments[n][1])),
                      readback.add(digest_bounds_queued(got, judge_kernels.row_squares_fused))) \
                if timed and not any(check.problem for check in checks) else None
            parts.mark("digest_s")
            queued.append((item.trial, checks, slots, digest))
            del got, ref  # a snapshot's block is free for the next item's: the device runs them in order
        numbers = readback.read()
        parts.mark("readback_s")
        del mapped
        parts.mark("release_s")  # the worker's memory unmapped (CUDA IPC)
        results = []
        for n, (trial, checks, slots, digest) in enumerate(queued):
            ok, message, stats = verdicts(checks, [numbers[slot] for slot in slots])
            # A right output must also be the one the timed iteration committed to (a wrong one is wrong).
            if ok and timed and not digests_match(commitments[n][0], numbers[digest[0]], numbers[digest[1]]):
                return Compared(protocol_error="the timed output recomputed for judging differs from the one whose "
                                "digest the worker sent in its round (beyond a nondeterministic kernel's rounding)")
            results.append(TrialVerdict(trial=trial.key, ok=ok, message=message, stats=stats))
            if not ok:
                break
        sync(self.device)
        if msg.trim:
            self.release_memory()
        parts.mark("sync_trim_s")
        return Compared(results=results, parts_s=parts.seconds, reserved_bytes=self.kept())

    def release_memory(self) -> None:
        """Give the allocator's free blocks back to the device: the judge lives across candidates, and
        blocks it kept after a 1 GiB-output problem starved the other Evaluators on the GPU. Not between
        one candidate's comparisons (`Compare.trim`): its reservation counts them, and freeing a large
        block after every trial only to allocate it again cost milliseconds a trial."""
        if self.device.type == "cuda" and torch.cuda.memory_reserved(self.device) - \
                torch.cuda.memory_allocated(self.device) > 256 << 20:
            torch.cuda.empty_cache()

    def time_reference(self, msg: TimeReference) -> ReferenceTimed:
        """The reference is timed here, in a process no candidate code ever ran in."""
        key = (self.key, json.dumps(dataclasses.asdict(msg.spec), sort_keys=True))
        if msg.bandwidth:
            if self.bandwidth_gbs is None:
                self.bandwidth_gbs = measure_bandwidth_gbs(self.device)
            return ReferenceTimed(bandwidth_gbs=self.bandwidth_gbs)
        if msg.setup:
            parts = Parts()
            if self.timer_key != key:
                self.release_memory()  # the trials' blocks: a graph's private pool could not reuse them
                parts.mark("release_s")
                model = torch.compile(self.model) if msg.spec.baseline == "compile" else self.model
                self.timer = Timer(model, self.module, self.device, msg.spec, msg.trials[0], parts=parts)
                self.timer_key, self.timer_eager = key, msg.spec.baseline != "compile"
            # From the timer's own buffers: a fresh input set and reference call beside them would be two
            # more sets of device memory, for a byte count.
            outputs = self.timer.output_for(msg.trials[0])
            io_bytes = sum(t.numel() * t.element_size() for t in [*self.timer.static_in, *outputs]
                           if isinstance(t, torch.Tensor))
            parts.mark("io_bytes_s")
            # The reference's graph kernels: the harness's evidence that listing them works on this device.
            return ReferenceTimed(mechanism=self.timer.mechanism, fresh_inputs=str(self.timer.fresh.mechanism),
                                  io_bytes=io_bytes, device_kernels=self.timer.device_kernels, parts_s=parts.seconds)
        times, _ = self.timer.run(msg.trials)  # the worker's loop, digests included
        # what a timing judge holds on the device (sizing shared GPUs)
        return ReferenceTimed(ref_us=list(times), reserved_bytes=self.kept())

    def timed_reference(self, trial: Trial) -> list:
        """A picked timed iteration's reference outputs, valid until the next call. Through the judge's timer
        where it times the eager reference: its static buffers hold them, where a fresh call beside the timer
        held a second input and output set (beyond the candidate's reservation: such judges ran the GPU out
        of memory). Timed inputs are one-offs: not cached."""
        if self.timer is not None and self.timer_key[0] == self.key and self.timer_eager:
            return self.timer.output_for(trial, wait=False)  # compare reads it next, queued behind it
        return self.reference(trial, cache=False)

    def reference(self, trial: Trial, cache: bool = True) -> list:
        if trial in self.refs:
            return self.refs[trial]
        inputs = make_inputs(self.module, trial, self.device)
        self.input_bytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
        with torch.no_grad():
            out = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in as_tensor_list(self.model(*inputs))]
        del inputs
        sync(self.device)
        nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))  # noqa: E731
        if cache and judge_keeps_outputs(nbytes(out), self.cache_bytes) and \
                sum(nbytes(ts) for ts in self.refs.values()) + nbytes(out) <= self.cache_bytes:
            self.refs[trial] = out
        return out


def run_judge(job: JudgeJob, sock) -> None:
    """Long-lived: answers Prepare and Compare requests from the harness until it closes the socket."""
    device = torch.device(job.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    pin_global_flags()
    judge, chan = Judge(device, job.cache_bytes), Channel(sock)
    while True:
        try:
            msg = chan.recv()
        except EOFError:
            return
        try:
            if isinstance(msg, Prepare):
                reply = judge.prepare(msg)
            elif isinstance(msg, Compare):
                reply = judge.compare(msg)
            elif isinstance(msg, TimeReference):
                reply = judge.time_reference(msg)
            elif isinstance(msg, Release):
                reply = judge.release(msg)
            else:
                raise ProtocolError(f"the judge does not answer {type(msg).__name__}")
        except Exception as e:  # a bad descriptor or reference failure must not kill the judge
            reply = REPLIES.get(type(msg), JudgeReply)(ok=False, error=short_error(e))
        sock.sendall(encode_reply(reply))
