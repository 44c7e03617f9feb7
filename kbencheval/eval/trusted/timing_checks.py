"""A candidate's time, judged by the harness: the trusted mode's rounds (alternating the judge's reference
and the worker's candidate), the kernels the timed work ran, the wall-clock bound and the physical floor.
Trusted code, a part of session.Session; a figure it cannot confirm ends the session `rejected`."""

from __future__ import annotations

import random
import statistics
import time

from kbencheval.eval.contract.device_kernels import check_report, kernel_violation
from kbencheval.eval.contract.protocol import Outputs, ProtocolError, RunPhase, TimeReference, Trial
from kbencheval.eval.contract.judge_replies import ReferenceTimed
from kbencheval.eval.contract.seeds import RunSeeds
from kbencheval.eval.result import EvalResult, Status, TimingStats
from kbencheval.eval.sharing.parts import add_parts
from kbencheval.eval.sharing.rounds import picks_per_round, precise_enough, round_sizes

# Generous: the bound catches forged figures, not noise. A round contradicts the candidate's figures when
# its events explain under WALL_FRACTION of the wall time the reference's loop does not account for; the
# candidate is rejected when most rounds do (a lone round slowed by host load is noise: with the
# host's cores busy, an honest round ran far beyond the reference's loop). The slack
# covers host-side differences between the two processes, which dominate for microsecond kernels; those
# are bounded by the physical floor instead (an honest CrossEntropyLoss, microseconds of events a round,
# was rejected with a smaller slack while the worker's tripwire checks ran inside its round).
WALL_FRACTION, WALL_SLACK_S = 0.25, 0.005
FLOOR_FRACTION = 0.5  # a copy kernel is not the peak; half the floor is still physically impossible


class Verdict(Exception):
    """Ends a session with this result (a failure the worker reported, a death, a wrong output); raised by
    the session's steps and TimingChecks, so a caller of one step alone catches it."""

    def __init__(self, result: EvalResult):
        super().__init__(result.error)
        self.result = result


def gate_window(checks: dict, phase: str) -> dict:
    """Where the device gate records how long `phase` waited for the device and when it held it."""
    return checks.setdefault("device_gate", {}).setdefault(phase, {})


class TimingChecks:
    """Session's timing: trusted_timing and the checks it and eager_timing make."""

    def trusted_timing(self, seeds: RunSeeds) -> EvalResult:
        """Rounds (`round_sizes`), alternating the judge (reference) and the worker (candidate); fresh
        seeds per iteration drawn now. With every round the worker commits to each iteration's output
        (its digest); after the round one iteration is picked, and once the rounds are over the worker
        recomputes the picked outputs for the judge (`spec.outputs_per_request` at a time), which holds
        each to its commitment and to the reference. The candidate's event figures must agree with the
        harness's wall clock.

        Only the rounds hold the device alone. Building the timers (capture, warm-up, one untimed pass)
        measures nothing and shares it; so does judging the picked outputs, a request at a time."""
        spec = self.job.timing
        rng = random.Random(seeds.timing[0].seed) if self.handles.cfg.seed is not None else random.SystemRandom()
        # Each step below takes the shared device on its own, so that a timer waiting for the device waits
        # for one step of ours, not for the whole setup or for all the picked outputs (several
        # Evaluators' timers spent seconds of each pass waiting for such work to drain).
        with self.handles.device_share(gate_window(self.checks, "timing_setup")) as hold:
            # Both timers at once, each in its own process.
            self.request(RunPhase(phase="timing_setup", trials=[], timing_trials=list(seeds.timing[:1])))
            ref_setup = self.judge_timing(TimeReference(spec=spec, trials=list(seeds.timing[:1]), setup=True))
            setup = self.answer("timing_setup", hold)
        eager = self.check_device_kernels(setup, ref_setup.device_kernels) == "profiler"
        # Which path timed the candidate: its captured graph, or eager calls (one that cannot be captured, or
        # whose launches the capture did not see: timing.Timer.replay_matches_eager), each with its own checks.
        self.checks["timing_path"] = "eager" if eager or self.handles.cfg.on_cpu else "cuda_graph"
        self.checks["fresh_inputs"] = {"reference": ref_setup.fresh_inputs,
                                       "candidate": str(setup.timing.get("fresh_inputs", "")
                                                        if isinstance(setup.timing, dict) else "")[:200]}
        times = {"ref_us": [], "new_us": []}
        rounds = self.checks["timing_rounds"] = []  # per round: wall and event seconds of both sides
        picks: list[tuple[Trial, list, int]] = []  # picked iterations, each with its digest and the digest's seed
        per_round = picks_per_round(spec)
        with self.handles.gate.exclusive(gate_window(self.checks, "timing")):
            # The floor's yardstick: measured once per judge, with the device to itself.
            bandwidth = self.judge_timing(TimeReference(spec=spec, trials=[], bandwidth=True)).bandwidth_gbs
            for r, size in enumerate(round_sizes(spec.iters)):
                if precise_enough(times, rounds, spec):
                    break
                picks += self.time_round(r, [Trial(seed=rng.getrandbits(62)) for _ in range(size)], rng, times,
                                         rounds, per_round)
                if eager:
                    self.check_device_kernels(self.ask(RunPhase(phase="round_checks", trials=[])))
        per_request = spec.outputs_per_request
        for start in range(0, len(picks), per_request):
            batch = picks[start:start + per_request]
            with self.handles.device_share(gate_window(self.checks, "timed_outputs")):
                self.judge(self.ask(RunPhase(phase="timed_outputs", trials=[p for p, _, _ in batch])),
                           where="in a timed iteration", committed=[c for _, c, _ in batch],
                           digest_seeds=[s for _, _, s in batch], trim=start + per_request >= len(picks))
        self.check_wall_bound(rounds)
        self.checks["timing_trust"] = (f"reference: {ref_setup.mechanism} in the judge; candidate: "
                                       f"{setup.timing['mechanism']} in its worker, bounded by the harness's clock")
        result = correct_result(times, self.checks)
        self.check_floor(result, ref_setup.io_bytes, bandwidth)
        return result

    def time_round(self, r: int, trials: list[Trial], rng: random.Random, times: dict, rounds: list,
                   picks: int = 1) -> list[tuple]:
        """One round, both sides, the reference first in even rounds (alternating cancels drift); its
        figures join `times` and `rounds`. Returns the `picks` iterations picked for judging, with digests."""
        spec = self.job.timing
        digest_seed = rng.getrandbits(62) | 1
        walls = {}
        for name in (("ref", "new") if r % 2 == 0 else ("new", "ref")):
            clock = time.monotonic()
            if name == "ref":
                reply = self.judge_timing(TimeReference(spec=spec, trials=trials))
                ref_us = reply.ref_us
                self.checks["judge_reserved_gb"] = max(self.checks.get("judge_reserved_gb", 0.0),
                                                       round((reply.reserved_bytes or 0) / 2**30, 3))
            else:
                timing = self.ask(RunPhase(phase="time_round", trials=[], timing_trials=trials,
                                           digest_seed=digest_seed)).timing
                timing = timing if isinstance(timing, dict) else {}
                new_us, digests = timing.get("new_us"), timing.get("digests")
            walls[name] = time.monotonic() - clock
        if not isinstance(new_us, list) or len(new_us) != len(trials) or \
                not all(isinstance(t, (int, float)) and t > 0 for t in new_us):
            raise ProtocolError("timing figures that do not match the timed iterations")
        if not isinstance(digests, list) or len(digests) != len(trials) or \
                not all(isinstance(d, list) for d in digests):
            raise ProtocolError("output digests that do not match the timed iterations")
        rounds.append({"iters": len(trials),
                       "ref_wall_s": round(walls["ref"], 6), "ref_events_s": round(sum(ref_us) / 1e6, 6),
                       "new_wall_s": round(walls["new"], 6), "new_events_s": round(sum(new_us) / 1e6, 6)})
        times["ref_us"] += ref_us
        times["new_us"] += new_us
        return [(trials[k], digests[k], digest_seed) for k in rng.sample(range(len(trials)), min(picks, len(trials)))]

    def check_device_kernels(self, reply: Outputs, reference: dict | None = None) -> str:
        """The kernels the worker lists for its timed work must be its own or allowed by the problem
        (device_kernels.kernel_violation). On GPUs the list is part of the reply: a reply without one is
        protocol abuse. A failed enumeration is recorded and, where the judge's enumeration of the
        reference's graph worked on the same device, rejected: the candidate's doing, not the driver's.
        Returns the report's source ('graph' or 'profiler'; '' on the CPU, where there is none)."""
        if self.handles.cfg.on_cpu:
            return ""
        report = (reply.timing or {}).get("device_kernels") if isinstance(reply.timing, dict) else None
        if problem := check_report(report):
            raise ProtocolError(f"the {reply.phase} reply lists {problem}")
        # Kept apart from checks, which the worker's messages update: its own "device_kernels" never counts.
        record = self.kernels = self.kernels or {"source": report["source"], "kernels": {}, "nodes": {}}
        self.checks["device_kernels"] = record
        if reference is not None and "kernels" in reference:
            self.checks["reference_kernels"] = {name[:160]: n for name, n in reference["kernels"].items()}
        if "error" in report:
            record["error"] = report["error"]
            if report["source"] == "graph" and reference is not None and "kernels" in reference:
                raise Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                    f"the kernels of the candidate's timed graph could not be listed ({report['error']}), though "
                    "the reference's could on this device")))
            return report["source"]
        for key in ("kernels", "nodes"):
            for name, n in report[key].items():
                record[key][name[:160]] = record[key].get(name[:160], 0) + n
        if violation := kernel_violation(report["kernels"], self.job.allowed_ops, nodes=report["nodes"],
                                         backend=self.job.backend):
            where = "in its timed graph" if report["source"] == "graph" else "in a profiled call"
            raise Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=f"{violation} ({where})"))
        return report["source"]

    def judge_timing(self, msg: TimeReference) -> ReferenceTimed:
        reply = self.handles.judge(msg)
        if reply.parts_s:
            add_parts(self.checks.setdefault("judge_parts_s", {}).setdefault("timing_setup", {}), reply.parts_s)
        if not reply.ok:
            raise Verdict(EvalResult(Status.RUNTIME_ERROR, compiled=True, checks=self.checks,
                                     error=f"the reference could not be timed: {reply.error}"))
        return reply

    def check_wall_bound(self, rounds: list[dict]) -> None:
        """The same loop (fresh inputs, flush, sync) ran for both: in each round the reference's wall time
        minus its trusted event times is the loop's overhead, so the candidate's events must explain the
        rest of its round. Rejected when more than half of the rounds contradict the figures."""
        contradicted = []
        for r in rounds:
            overhead_s = max(0.0, r["ref_wall_s"] - r["ref_events_s"])
            unexplained_s = r["new_wall_s"] - overhead_s
            if r["new_events_s"] < WALL_FRACTION * unexplained_s - WALL_SLACK_S:
                contradicted.append((r, overhead_s))
        if 2 * len(contradicted) > len(rounds):
            r, overhead_s = max(contradicted, key=lambda c: c[0]["new_wall_s"] - c[1] - c[0]["new_events_s"])
            raise Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                f"timing contradicted by the harness's clock in {len(contradicted)} of {len(rounds)} rounds: e.g. "
                f"the candidate's events claim {r['new_events_s'] * 1e3:.3f} ms for a round that took "
                f"{r['new_wall_s'] * 1e3:.3f} ms (the same loop around the reference: {overhead_s * 1e3:.3f} ms "
                "besides the reference's own time)")))

    def check_floor(self, result: EvalResult, io_bytes: int, bandwidth: float) -> None:
        """No kernel moves its inputs and outputs faster than the device's measured bandwidth."""
        if not bandwidth or result.runtime_us is None:
            return
        floor_us = io_bytes / (bandwidth * 1e9) * 1e6
        self.checks["physical_floor_us"] = round(floor_us, 3)
        if result.runtime_us < FLOOR_FRACTION * floor_us:
            raise Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                f"a median time of {result.runtime_us:.2f} µs is below the physical floor: {io_bytes} "
                f"bytes of inputs and outputs at the measured {bandwidth:.0f} GB/s take {floor_us:.2f} µs")))


def correct_result(timing: dict | None, checks: dict) -> EvalResult:
    result = EvalResult(Status.CORRECT, compiled=True, correct=True, checks=checks)
    if timing:
        checks.setdefault("timing_trust", "eager: measured inside the candidate's process (untrusted)")
        ref, new = TimingStats.of(timing["ref_us"]), TimingStats.of(timing["new_us"])
        result.runtime_us, result.ref_runtime_us = new.median_us, ref.median_us
        result.runtime_stats, result.ref_runtime_stats = new, ref
        # Median of per-iteration ratios: each pair ran back to back, so clock and thermal drift
        # cancel within the pair instead of adding to the spread of either median.
        ratios = [r / n for r, n in zip(timing["ref_us"], timing["new_us"]) if n > 0]
        result.speedup = round(statistics.median(ratios), 4) if ratios else None
        checks["speedup_of_medians"] = round(ref.median_us / new.median_us, 4) if new.median_us > 0 else None
        result.timing_meaningful = True
    return result
