"""EvaluatorPool: which candidate runs on which host, and when a host is given up on.

One deadline rule: the per-candidate limit is the evaluator's own (`eval.timeout_s`), and the pool waits
`eval.timeout_s + deadline_margin_s` for a host. A slow candidate therefore gets the evaluator's clean
`timeout` verdict and its host lives on; only a host that stops answering altogether (a hang the
evaluator could not cut, a crash) is replaced, its candidate scored `timeout` / `runtime_error`, and the
rest goes on. A candidate's deadline starts once its host is up (Evaluators take seconds to start);
a host that is not up within `host_start_timeout_s` stops the call with a PoolError.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import math
import time
from typing import Callable, Sequence

from kbencheval.eval.config import EvalConfig
from kbencheval.eval.pool.hosts import LocalHost, RayHost
from kbencheval.eval.result import EvalResult, Status
from kbencheval.eval.sharing.schedule import EvalSeconds

PLACEMENTS = ("local", "ray")
HOST_CRASHED = "host_crashed"  # checks["pool"] of a verdict the pool made because its host failed


class PoolError(RuntimeError):
    """No verdict can be had from this pool: a host could not start."""


@dataclasses.dataclass
class _Running:
    job: int
    host: int
    deadline: float
    started: float


class EvaluatorPool:
    def __init__(self, cfg: EvalConfig, devices: Sequence[str], *, placement: str = "local",
                 evaluators_per_host: int = 1, ray_options: Sequence[dict] | None = None,
                 deadline_margin_s: float = 60.0, host_start_timeout_s: float = 600.0,
                 reward_section: str = "", dedupe: bool = True, make_host: Callable | None = None,
                 start_timeout_key: str = "host_start_timeout_s",
                 deadline_key: str = "eval.timeout_s + deadline_margin_s"):
        """One host per entry of `devices` ("cpu", "cuda:1"; under Ray "cuda" is the GPU Ray gives the
        actor), each with `evaluators_per_host` Evaluators. `ray_options[i]` places host i (resources
        or a placement-group slot). `reward_section` (e.g. "reward.eval"): verdicts become rewards, so
        the config must be reward-grade. dedupe: the same code for the same problem is judged once per
        call. `make_host(i, cfg)` replaces the placement's host (tests). `start_timeout_key`,
        `deadline_key`: the caller's names for those limits, so that an error names the key to change."""
        if placement not in PLACEMENTS:
            raise ValueError(f"placement={placement!r}: choose local or ray")
        if not devices:
            raise ValueError("an EvaluatorPool needs at least one device")
        if reward_section:
            cfg.require_reward_grade(reward_section)
        self.devices, self.placement = list(devices), placement
        self.cfg = _sized(cfg, self.devices, placement, evaluators_per_host)
        self.lanes, self.ray_options = evaluators_per_host, list(ray_options or [])
        self.deadline_margin_s, self.host_start_timeout_s = deadline_margin_s, host_start_timeout_s
        self.reward_section, self.dedupe, self._make_host = reward_section, dedupe, make_host
        self.start_timeout_key, self.deadline_key = start_timeout_key, deadline_key
        self.replaced = 0  # hosts given up on (a deadline or a crash), over the pool's life
        self.deduplicated = 0  # jobs that shared the verdict of the same code on the same problem
        self._restarts = [0] * len(self.devices)  # fork server + judge restarts in each host's Evaluators
        self._retired_restarts = 0
        self.eval_seconds = EvalSeconds()  # per problem, over the pool's life: the longest start first
        self._started_at: dict[int, float] = {}  # host index -> when it was spawned, until it is up
        self.hosts = [self._spawn(i) for i in range(len(self.devices))]

    # -- hosts -----------------------------------------------------------------------------------
    def _spawn(self, i: int):
        cfg = dataclasses.replace(self.cfg, device=self.devices[i])
        if self._make_host is not None:
            host = self._make_host(i, cfg)
        elif self.placement == "ray":
            options = self.ray_options[i] if i < len(self.ray_options) else {}
            host = RayHost(cfg, self.lanes, options, reward_section=self.reward_section)
        else:
            host = LocalHost(cfg, self.lanes)
        self._started_at[i] = time.monotonic()
        return host

    def _check_starts(self, running: dict) -> None:
        """Hosts now up begin their candidates' deadlines; a start that failed or ran past its limit
        stops the call, since no candidate could be judged there."""
        now = time.monotonic()
        for i, spawned in list(self._started_at.items()):
            ready = self.hosts[i].ready
            if ready.done():
                if ready.exception() is not None:
                    raise PoolError(f"evaluator host {i} ({self.devices[i]}) failed to start: "
                                    f"{_last_line(ready.exception())}")
                del self._started_at[i]
                for run in running.values():
                    if run.host == i:
                        run.deadline, run.started = now + self._wait_for, now
            elif now - spawned >= self.host_start_timeout_s:
                raise PoolError(f"evaluator host {i} ({self.devices[i]}) did not start within "
                                f"{self.start_timeout_key} = {self.host_start_timeout_s:g}s; raise it or check the host's log")

    def _replace(self, i: int, running: dict, pending: list, idle: list) -> None:
        """A new host in slot i. Candidates still running on the old one are not to blame: they go back
        to `pending` and run again on the new host."""
        for future, run in list(running.items()):
            if run.host == i:
                running.pop(future)
                pending.append(run.job)
        idle[:] = [w for w in idle if w != i] + [i] * self.lanes
        self._retired_restarts += self._restarts[i]
        self._restarts[i] = 0
        self.hosts[i].abandon()
        self.hosts[i] = self._spawn(i)
        self.replaced += 1

    @property
    def _wait_for(self) -> float:
        return self.cfg.timeout_s + self.deadline_margin_s

    # -- judging -----------------------------------------------------------------------------------
    def evaluate(self, jobs: Sequence[tuple], backend: str = "triton",
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        """One verdict per job (problem, text) or (problem, text, backend), in job order; `on_result(i,
        verdict)` hears each as it arrives. With dedupe, jobs with the same problem, backend and code (as
        the evaluator extracts it) are judged once and each gets its own copy of the verdict."""
        from kbencheval.extract import extract_code

        jobs = [(j[0], j[1], j[2] if len(j) > 2 else backend) for j in jobs]
        first_of: dict[tuple, int] = {}
        unique = list(range(len(jobs)))
        if self.dedupe:  # a text with no code block keeps its own verdict (a format error depends on the text)
            keys = [(p.key, b, "code", code) if (code := extract_code(t)) is not None else (p.key, b, "text", t)
                    for p, t, b in jobs]
            unique = [first_of.setdefault(key, j) for j, key in enumerate(keys)]
        copies: dict[int, list[int]] = {}
        for j, u in enumerate(unique):
            if j != u:
                copies.setdefault(u, []).append(j)
        results: list[EvalResult | None] = [None] * len(jobs)

        def deliver(u: int, verdict: EvalResult) -> None:
            for j in [u, *copies.get(u, [])]:
                results[j] = verdict if j == u else copy.deepcopy(verdict)
                if on_result is not None:
                    on_result(j, results[j])

        self._judge(sorted(set(unique)), jobs, deliver)
        self.deduplicated += len(jobs) - len(set(unique))
        return results  # type: ignore[return-value]

    def _judge(self, todo: list[int], jobs: list[tuple], deliver: Callable[[int, EvalResult], None]) -> None:
        # A call ends with its last verdict: the problems slowest to evaluate so far go first (schedule.py).
        order = self.eval_seconds.longest_first([jobs[j][0].key for j in todo])
        pending = [todo[k] for k in order][::-1]
        running: dict[concurrent.futures.Future, _Running] = {}
        idle = [w for w in range(len(self.hosts)) for _ in range(self.lanes)]  # free lanes
        while pending or running:
            while pending and idle:
                j, w = pending.pop(), idle.pop()
                problem, text, backend = jobs[j]
                deadline = math.inf if w in self._started_at else time.monotonic() + self._wait_for
                running[self.hosts[w].submit(problem, text, backend)] = _Running(j, w, deadline, time.monotonic())
            limits = [run.deadline for run in running.values()]
            limits += [spawned + self.host_start_timeout_s for spawned in self._started_at.values()]
            starts = [self.hosts[i].ready for i in self._started_at]
            timeout = max(0.0, min(limits, default=1.0) - time.monotonic())
            done, _ = concurrent.futures.wait([*running, *starts], timeout=timeout,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            self._check_starts(running)
            for future in done:
                if future not in running:  # a host's start, or a job whose host was replaced
                    continue
                run = running.pop(future)
                self._finish(future, run, jobs, deliver, running, pending, idle)
            now = time.monotonic()
            for future, run in list(running.items()):
                if now >= run.deadline and future in running:
                    running.pop(future)
                    deliver(run.job, _failure(jobs[run.job][0], Status.TIMEOUT, "deadline",
                                              f"the evaluator host did not answer within {self.deadline_key} = "
                                              f"{self._wait_for:g}s; host replaced"))
                    self._replace(run.host, running, pending, idle)

    def _finish(self, future, run: _Running, jobs, deliver, running, pending, idle) -> None:
        try:
            verdict = future.result()
        except Exception as e:  # noqa: BLE001 - the host (not the candidate's sandbox) failed
            if run.host in self._started_at:  # did it fail to start, or start and then fail on this job?
                concurrent.futures.wait([self.hosts[run.host].ready], timeout=30)
                self._check_starts(running)
            deliver(run.job, _failure(jobs[run.job][0], Status.RUNTIME_ERROR, HOST_CRASHED,
                                      f"evaluator host crashed: {_last_line(e)}"))
            self._replace(run.host, running, pending, idle)
            return
        self.eval_seconds.record(jobs[run.job][0].key, time.monotonic() - run.started)
        self._restarts[run.host] = sum(verdict.checks.get("harness_restarts", {}).values())
        idle.append(run.host)
        deliver(run.job, verdict)

    def wait_ready(self) -> None:
        """Blocks until every host's Evaluators have started, or raises the first start's error (a benchmark
        then times judging alone; `evaluate` does not need it)."""
        concurrent.futures.wait([host.ready for host in self.hosts], timeout=self.host_start_timeout_s)
        for host in self.hosts:
            host.ready.result(timeout=0)

    def metrics(self) -> dict[str, float]:
        """Over the pool's life: hosts replaced, shared verdicts, and the processes each Evaluator
        restarted after they died."""
        return {"eval/workers_replaced": float(self.replaced), "eval/deduplicated": float(self.deduplicated),
                "eval/harness_restarts": float(self._retired_restarts + sum(self._restarts))}

    def close(self) -> None:
        for host in self.hosts:
            host.close()

    def __enter__(self) -> "EvaluatorPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _sized(cfg: EvalConfig, devices: list[str], placement: str, lanes: int) -> EvalConfig:
    """Local hosts share this machine's cores and each GPU's memory; Ray sizes its actors itself."""
    if placement != "local":
        return cfg
    from kbencheval.eval.config import cpu_threads_per_evaluator, device_memory_per_evaluator

    cfg = cpu_threads_per_evaluator(cfg, devices.count("cpu") * lanes)
    gpus = [d for d in devices if d != "cpu"]
    return device_memory_per_evaluator(cfg, lanes * max((gpus.count(d) for d in set(gpus)), default=1))


def _failure(problem, status: Status, why: str, error: str) -> EvalResult:
    # No feedback text here: kbencheval.prompts.feedback_message frames the status and error for the model.
    return EvalResult(status=status, problem=problem.key, error=error, checks={"pool": why})


def _last_line(error: BaseException) -> str:
    """An error's last non-empty line (a Ray error's cause), after the error's type."""
    cause = next((line for line in reversed(str(error).strip().splitlines()) if line.strip()), "")
    return f"{type(error).__name__}: {cause[:300]}"
