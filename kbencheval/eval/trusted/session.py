"""One candidate's evaluation as the harness drives it: ask the worker, relay to the judge, decide.

Trusted code (runs in the harness process). The worker's messages are typed (protocol.py); anything
but the answer to the current request is protocol abuse and the candidate is `rejected`.
"""

from __future__ import annotations

import contextlib
import random
import signal
import statistics
import time
from pathlib import Path

from kbencheval.eval.contract.errors import clip, last_exception_line, tail
from kbencheval.eval.contract.device_kernels import check_report, kernel_violation
from kbencheval.eval.sharing.parts import add_parts
from kbencheval.eval.processes.lifecycle import MemoryWatchdog
from kbencheval.eval.contract.protocol import (CandidateJob, Compare, Compiled, Compiling, Failure, Outputs, ProtocolError,
                                      Ready, Resume, RunPhase, TimeReference, Trial)
from kbencheval.eval.result import EvalResult, Status, TimingStats
from kbencheval.eval.sharing.rounds import picks_per_round, precise_enough, round_sizes
from kbencheval.eval.contract.seeds import RunSeeds

# Generous: the bound catches forged figures, not noise. A round contradicts the candidate's figures when
# its events explain under WALL_FRACTION of the wall time the reference's loop does not account for; the
# candidate is rejected when most rounds do (a lone round slowed by host load is noise, seen on the H100
# with the host's cores busy: one honest ReLU round took 60 ms beyond the reference's loop). The slack
# covers host-side differences between the two processes, which dominate for microsecond kernels; those
# are bounded by the physical floor instead (an honest CrossEntropyLoss, ~0.1 ms of events per round,
# was rejected on the H100 with 2 ms of slack while the worker's tripwire checks ran inside its round).
WALL_FRACTION, WALL_SLACK_S = 0.25, 0.005
FLOOR_FRACTION = 0.5  # a copy kernel is not the peak; half the floor is still physically impossible
# Checks the harness writes. A worker's message may add its own (phases_s, launches, timing_mechanism)
# but never these, nor correctness_*: they are the record a user reads, not the candidate's to write.
HARNESS_KEYS = frozenset({"seeds", "static", "sizes", "stress_trials", "timing_rounds", "timing_trust",
                          "device_kernels", "reference_kernels", "physical_floor_us", "speedup_of_medians",
                          "device_gate", "harness_restarts", "harness_restarted", "served_by", "device_oom_retry",
                          "judge_reserved_gb", "harness_s", "compiles_aside", "fresh_inputs",
                          "prepare_oom_retry", "judge_parts_s", "timing_mode", "cpu_verdict", "sandbox_weaker",
                          "timing_path"})


class _Verdict(Exception):
    """Ends a session with this result (a failure the worker reported, a death, a wrong output)."""

    def __init__(self, result: EvalResult):
        super().__init__(result.error)
        self.result = result


class Session:
    """One candidate's conversation: the harness asks, the worker answers, the judge decides.

    Nothing the worker sends can make a verdict `correct` on its own: the verdict is `correct` only
    when every phase the harness requested was answered with exactly the requested items and the
    judge passed them all. Any other message is protocol abuse (`rejected`).
    """

    def __init__(self, ev, conn, pid: int, job: CandidateJob, checks: dict, tolerance: dict):
        self.ev, self.conn, self.pid, self.job, self.checks, self.tolerance = ev, conn, pid, job, checks, tolerance
        self.spent = self.checks["harness_s"] = {}  # per phase: seconds waiting on the worker and on the judge
        self.compiled = False
        self.requested: list[Trial] = []
        self.asked_at = 0.0  # when the pending request was sent
        self.kernels: dict = {}  # what the timed work ran, as the harness read it (checks["device_kernels"])
        self.watchdog = None

    def run(self, trials: list[Trial], seeds: RunSeeds, started: float | None = None) -> EvalResult:
        """`started`: when the worker's fork was requested (its start, until Ready, is `harness_s["start"]`)."""
        cfg = self.ev.cfg
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
            with self.ev.gate.exclusive(gate_window(self.checks, "timing")):
                return self.eager_timing(seeds)
        except ProtocolError as e:
            return EvalResult(Status.REJECTED, compiled=self.compiled, checks=self.checks,
                              error=f"the worker broke the evaluation protocol: {e}")
        except _Verdict as v:
            return v.result
        finally:
            if self.watchdog:
                self.watchdog.stop()

    def run_trials(self, trials: list[Trial], trim: bool) -> None:
        """One trial per request: the worker and the judge each hold one trial's tensors, not all of them
        (4 Evaluators ran an H100 out of memory that way). The judge compares a trial while the worker runs
        the next: the worker then holds the trial it runs and the one being judged, as its reservation
        counts (sizing.device_bytes_needed: a call's peak and one exported output). The device is shared
        per trial, so a timer waiting for it waits for one trial of each, not for all of them."""
        judged: tuple[Outputs, list[Trial]] | None = None  # the last trial's outputs, not yet judged
        for trial in trials:  # Triton compiles in the first, on first call, with the device let go
            with self.ev.device_share(gate_window(self.checks, "trials")) as hold:
                self.request(RunPhase(phase="trials", trials=[trial]))
                if judged is not None:
                    self.judge(*judged, trim=False)
                judged = (self.answer("trials", hold), [trial])
        if judged is not None:
            with self.ev.device_share(gate_window(self.checks, "trials")):
                self.judge(*judged, trim=trim)

    def eager_timing(self, seeds: RunSeeds) -> EvalResult:
        """KernelBench-style timing in the worker; four timed calls, unknown to the candidate until now,
        and a post-timing trial are checked by the judge."""
        spot = sorted(random.SystemRandom().sample(range(self.ev.cfg.iters), min(4, self.ev.cfg.iters)))
        post = self.ask(RunPhase(phase="timing", trials=list(seeds.post_timing),
                                 timing_trials=list(seeds.timing), spot_checks=spot))
        self.judge(post, where="after timing")
        spot_outputs = self.expect(Outputs, "timing_spot")
        if len(spot_outputs.items) > len(spot) or any(i.trial not in seeds.timing for i in spot_outputs.items):
            raise ProtocolError("spot-checked outputs for inputs that were not timed")
        self.judge(spot_outputs, expected=[i.trial for i in spot_outputs.items], where="in a timed call")
        self.check_device_kernels(spot_outputs)
        return correct_result(spot_outputs.timing, self.checks)

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
        rng = random.Random(seeds.timing[0].seed) if self.ev.cfg.seed is not None else random.SystemRandom()
        # Each step below takes the shared device on its own, so that a timer waiting for the device waits
        # for one step of ours, not for the whole setup or for all the picked outputs (on the H100, eight
        # Evaluators' timers spent 7-9 s of a 35-40 s pass waiting for such work to drain).
        with self.ev.device_share(gate_window(self.checks, "timing_setup")) as hold:
            # Both timers at once, each in its own process.
            self.request(RunPhase(phase="timing_setup", trials=[], timing_trials=list(seeds.timing[:1])))
            ref_setup = self.judge_timing(TimeReference(spec=spec, trials=list(seeds.timing[:1]), setup=True))
            setup = self.answer("timing_setup", hold)
        eager = self.check_device_kernels(setup, ref_setup.get("device_kernels")) == "profiler"
        # Which path timed the candidate: its captured graph, or eager calls (one that cannot be captured, or
        # whose launches the capture did not see: timing.Timer.replay_matches_eager), each with its own checks.
        self.checks["timing_path"] = "eager" if eager or self.ev.cfg.on_cpu else "cuda_graph"
        self.checks["fresh_inputs"] = {"reference": str(ref_setup.get("fresh_inputs", "")),
                                       "candidate": str(setup.timing.get("fresh_inputs", "")
                                                        if isinstance(setup.timing, dict) else "")[:200]}
        times = {"ref_us": [], "new_us": []}
        rounds = self.checks["timing_rounds"] = []  # per round: wall and event seconds of both sides
        picks: list[tuple[Trial, list, int]] = []  # picked iterations, each with its digest and the digest's seed
        per_round = picks_per_round(spec)
        with self.ev.gate.exclusive(gate_window(self.checks, "timing")):
            # The floor's yardstick: measured once per judge, with the device to itself.
            bandwidth = self.judge_timing(TimeReference(spec=spec, trials=[], bandwidth=True))["bandwidth_gbs"]
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
            with self.ev.device_share(gate_window(self.checks, "timed_outputs")):
                self.judge(self.ask(RunPhase(phase="timed_outputs", trials=[p for p, _, _ in batch])),
                           where="in a timed iteration", committed=[c for _, c, _ in batch],
                           digest_seeds=[s for _, _, s in batch], trim=start + per_request >= len(picks))
        self.check_wall_bound(rounds)
        self.checks["timing_trust"] = (f"reference: {ref_setup['mechanism']} in the judge; candidate: "
                                       f"{setup.timing['mechanism']} in its worker, bounded by the harness's clock")
        result = correct_result(times, self.checks)
        self.check_floor(result, ref_setup["io_bytes"], bandwidth)
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
                ref_us = reply["ref_us"]
                self.checks["judge_reserved_gb"] = max(self.checks.get("judge_reserved_gb", 0.0),
                                                       round(reply.get("reserved_bytes", 0) / 2**30, 3))
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
        if self.ev.cfg.on_cpu:
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
                raise _Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                    f"the kernels of the candidate's timed graph could not be listed ({report['error']}), though "
                    "the reference's could on this device")))
            return report["source"]
        for key in ("kernels", "nodes"):
            for name, n in report[key].items():
                record[key][name[:160]] = record[key].get(name[:160], 0) + n
        if violation := kernel_violation(report["kernels"], self.job.allowed_ops, nodes=report["nodes"],
                                         backend=self.job.backend):
            where = "in its timed graph" if report["source"] == "graph" else "in a profiled call"
            raise _Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=f"{violation} ({where})"))
        return report["source"]

    def judge_timing(self, msg: TimeReference) -> dict:
        reply = self.ev._judge_call(msg)
        if isinstance(reply.get("parts_s"), dict):
            add_parts(self.checks.setdefault("judge_parts_s", {}).setdefault("timing_setup", {}), reply["parts_s"])
        if not reply.get("ok"):
            raise _Verdict(EvalResult(Status.RUNTIME_ERROR, compiled=True, checks=self.checks,
                                      error=f"the reference could not be timed: {reply.get('error')}"))
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
            raise _Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
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
            raise _Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                f"a median time of {result.runtime_us:.2f} µs is below the physical floor: {io_bytes} "
                f"bytes of inputs and outputs at the measured {bandwidth:.0f} GB/s take {floor_us:.2f} µs")))

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
            if self.ev.cfg.on_cpu:
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
            raise _Verdict(EvalResult(Status.REJECTED, compiled=True, checks=self.checks, error=(
                f"the candidate ran machine code it compiled ({found}): on the CPU the work of a compiled "
                "extension cannot be attributed to it (no device record), so it is judged only on a GPU: "
                "evaluate backend=cuda candidates with device=cuda")))

    def send(self, msg) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            raise _Verdict(self.died()) from None

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
            raise _Verdict(EvalResult(Status.RUNTIME_ERROR, compiled=self.compiled, checks=self.checks,
                                      error=f"the candidate exceeded the {self.ev.cfg.memory_limit_gb:g} GiB "
                                            "host memory limit"))
        if msg is None:
            raise _Verdict(self.died())
        if isinstance(msg, (Ready, Failure, Outputs)):
            self.checks.update({k: v for k, v in msg.checks.items()
                                if k not in HARNESS_KEYS and not k.startswith("correctness_")})
        if isinstance(msg, Failure):  # the worker only ever reports failures; success is the judge's call
            compiled = msg.status not in (Status.COMPILE_ERROR, Status.FORMAT_ERROR)
            raise _Verdict(EvalResult(msg.status, compiled=compiled, error=clip(msg.error), checks=self.checks))
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
        reply = self.ev._judge_call(Compare(job_dir=self.job.job_dir, phase=outputs.phase, tolerance=self.tolerance,
                                            expected=expected, items=outputs.items,
                                            committed=committed, digest_seeds=digest_seeds, trim=trim))
        self.add_spent(outputs.phase, "judge_s", clock)
        add_parts(self.checks.setdefault("judge_parts_s", {}).setdefault(outputs.phase, {}), reply.get("parts_s") or {})
        if not reply.get("ok"):
            raise _Verdict(EvalResult(Status.RUNTIME_ERROR, compiled=True, checks=self.checks,
                                      error=f"could not read the candidate's outputs: {reply.get('error')}"))
        if reply.get("protocol_error"):
            raise ProtocolError(reply["protocol_error"])
        # Appended, not replaced: timed outputs are judged once per round, and every round is on record.
        self.checks.setdefault(f"correctness_{outputs.phase}", []).extend(
            {"trial": r["trial"], "ok": r["ok"], **r["stats"]} for r in reply["results"])
        if failed := next((r for r in reply["results"] if not r["ok"]), None):
            raise _Verdict(EvalResult(Status.INCORRECT, compiled=True, checks=self.checks,
                                      error=f"{failed['message']} ({where}, inputs {failed['trial']})"))

    def died(self) -> EvalResult:
        time.sleep(0.05)
        status = self.ev._server.call(op="exit_status", pid=self.pid)
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
        # tail alone would keep instead of "CUDA error: out of memory" (seen on the H100).
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


def gate_window(checks: dict, phase: str) -> dict:
    """Where the device gate records how long `phase` waited for the device and when it held it."""
    return checks.setdefault("device_gate", {}).setdefault(phase, {})


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

