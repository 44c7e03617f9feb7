"""EvaluatorPool: which candidate runs on which worker, and when a worker is given up on.

One deadline rule: the per-candidate limit is the evaluator's own (`eval.timeout_s`), and the pool waits
`eval.timeout_s + deadline_margin_s` for a worker. A slow candidate therefore gets the evaluator's clean
`timeout` verdict and its worker lives on; only a worker that stops answering altogether (a hang the
evaluator could not cut, a crash) is replaced, its candidate scored `timeout` / `runtime_error`, and the
rest goes on. A candidate's deadline starts once its worker is up (Evaluators take seconds to start);
a worker that is not up within `worker_start_timeout_s` stops the call with a PoolError.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import math
import time
from typing import Callable, Sequence

from kbencheval.eval.config import EvalConfig
from kbencheval.eval.pool.workers import LocalWorker, RayWorker
from kbencheval.eval.result import EvalResult, Status
from kbencheval.eval.sharing.schedule import EvalSeconds

PLACEMENTS = ("local", "ray")
WORKER_CRASHED = "worker_crashed"  # checks["pool"] of a verdict the pool made because its worker failed


class PoolError(RuntimeError):
    """No verdict can be had from this pool: a worker could not start."""


@dataclasses.dataclass
class _Running:
    job: int
    worker: int
    deadline: float
    started: float


class EvaluatorPool:
    def __init__(self, cfg: EvalConfig, devices: Sequence[str], *, placement: str = "local",
                 evaluators_per_worker: int = 1, ray_options: Sequence[dict] | None = None,
                 deadline_margin_s: float = 60.0, worker_start_timeout_s: float = 600.0,
                 reward_section: str = "", dedupe: bool = True, make_worker: Callable | None = None,
                 keys: str = ""):
        """One worker per entry of `devices` ("cpu", "cuda:1"; under Ray "cuda" is the GPU Ray gives the
        actor), each with `evaluators_per_worker` Evaluators. `ray_options[i]` places worker i (resources
        or a placement-group slot). `reward_section` (e.g. "reward.eval"): verdicts become rewards, so
        the config must be reward-grade. dedupe: the same code for the same problem is judged once per
        call. `make_worker(i, cfg)` replaces the placement's worker (tests). `keys`: where the caller's
        config keeps these settings ("reward."), so an error names the key to change."""
        if placement not in PLACEMENTS:
            raise ValueError(f"placement={placement!r}: choose local or ray")
        if not devices:
            raise ValueError("an EvaluatorPool needs at least one device")
        if reward_section:
            cfg.require_reward_grade(reward_section)
        self.cfg, self.devices, self.placement = _sized(cfg, list(devices), placement, evaluators_per_worker), list(devices), placement
        self.lanes, self.ray_options = evaluators_per_worker, list(ray_options or [])
        self.deadline_margin_s, self.worker_start_timeout_s = deadline_margin_s, worker_start_timeout_s
        self.reward_section, self.dedupe, self._make_worker, self.keys = reward_section, dedupe, make_worker, keys
        self.replaced = 0  # workers given up on (a deadline or a crash), over the pool's life
        self.deduplicated = 0  # jobs that shared the verdict of the same code on the same problem
        self._restarts = [0] * len(self.devices)  # fork server + judge restarts in each worker's Evaluators
        self._retired_restarts = 0
        self.eval_seconds = EvalSeconds()  # per problem, over the pool's life: the longest start first
        self._started_at: dict[int, float] = {}  # worker index -> when it was spawned, until it is up
        self.workers = [self._spawn(i) for i in range(len(self.devices))]

    # -- workers -----------------------------------------------------------------------------------
    def _spawn(self, i: int):
        cfg = dataclasses.replace(self.cfg, device=self.devices[i])
        if self._make_worker is not None:
            worker = self._make_worker(i, cfg)
        elif self.placement == "ray":
            options = self.ray_options[i] if i < len(self.ray_options) else {}
            worker = RayWorker(cfg, self.lanes, options, reward_section=self.reward_section)
        else:
            worker = LocalWorker(cfg, self.lanes)
        self._started_at[i] = time.monotonic()
        return worker

    def _check_starts(self, running: dict) -> None:
        """Workers now up begin their candidates' deadlines; a start that failed or ran past its limit
        stops the call, since no candidate could be judged there."""
        now = time.monotonic()
        for i, spawned in list(self._started_at.items()):
            ready = self.workers[i].ready
            if ready.done():
                if ready.exception() is not None:
                    raise PoolError(f"eval worker {i} ({self.devices[i]}) failed to start: {_last_line(ready.exception())}")
                del self._started_at[i]
                for run in running.values():
                    if run.worker == i:
                        run.deadline, run.started = now + self._wait_for, now
            elif now - spawned >= self.worker_start_timeout_s:
                raise PoolError(f"eval worker {i} ({self.devices[i]}) did not start within {self.keys}worker_start_timeout_s = "
                                f"{self.worker_start_timeout_s:g}s; raise it or check the worker's log")

    def _replace(self, i: int, running: dict, pending: list, idle: list) -> None:
        """A new worker in slot i. Candidates still running on the old one are not to blame: they go back
        to `pending` and run again on the new worker."""
        for future, run in list(running.items()):
            if run.worker == i:
                running.pop(future)
                pending.append(run.job)
        idle[:] = [w for w in idle if w != i] + [i] * self.lanes
        self._retired_restarts += self._restarts[i]
        self._restarts[i] = 0
        self.workers[i].abandon()
        self.workers[i] = self._spawn(i)
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
        idle = [w for w in range(len(self.workers)) for _ in range(self.lanes)]  # free lanes
        while pending or running:
            while pending and idle:
                j, w = pending.pop(), idle.pop()
                problem, text, backend = jobs[j]
                deadline = math.inf if w in self._started_at else time.monotonic() + self._wait_for
                running[self.workers[w].submit(problem, text, backend)] = _Running(j, w, deadline, time.monotonic())
            limits = [run.deadline for run in running.values()]
            limits += [spawned + self.worker_start_timeout_s for spawned in self._started_at.values()]
            starts = [self.workers[i].ready for i in self._started_at]
            timeout = max(0.0, min(limits, default=1.0) - time.monotonic())
            done, _ = concurrent.futures.wait([*running, *starts], timeout=timeout,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            self._check_starts(running)
            for future in done:
                if future not in running:  # a worker's start, or a job whose worker was replaced
                    continue
                run = running.pop(future)
                self._finish(future, run, jobs, deliver, running, pending, idle)
            now = time.monotonic()
            for future, run in list(running.items()):
                if now >= run.deadline and future in running:
                    running.pop(future)
                    deliver(run.job, _failure(jobs[run.job][0], Status.TIMEOUT, "deadline",
                                              f"the eval worker did not answer within {self.keys}eval.timeout_s + "
                                              f"{self.keys}deadline_margin_s = {self._wait_for:g}s; worker replaced"))
                    self._replace(run.worker, running, pending, idle)

    def _finish(self, future, run: _Running, jobs, deliver, running, pending, idle) -> None:
        try:
            verdict = future.result()
        except Exception as e:  # noqa: BLE001 - the worker (not the candidate's sandbox) failed
            if run.worker in self._started_at:  # did it fail to start, or start and then fail on this job?
                concurrent.futures.wait([self.workers[run.worker].ready], timeout=30)
                self._check_starts(running)
            deliver(run.job, _failure(jobs[run.job][0], Status.RUNTIME_ERROR, WORKER_CRASHED,
                                      f"eval worker crashed: {_last_line(e)}"))
            self._replace(run.worker, running, pending, idle)
            return
        self.eval_seconds.record(jobs[run.job][0].key, time.monotonic() - run.started)
        self._restarts[run.worker] = sum(verdict.checks.get("harness_restarts", {}).values())
        idle.append(run.worker)
        deliver(run.job, verdict)

    def metrics(self) -> dict[str, float]:
        """Over the pool's life: workers replaced, shared verdicts, and the processes each Evaluator
        restarted after they died."""
        return {"eval/workers_replaced": float(self.replaced), "eval/deduplicated": float(self.deduplicated),
                "eval/harness_restarts": float(self._retired_restarts + sum(self._restarts))}

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def __enter__(self) -> "EvaluatorPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _sized(cfg: EvalConfig, devices: list[str], placement: str, lanes: int) -> EvalConfig:
    """Local workers share this machine's cores and each GPU's memory; Ray sizes its actors itself."""
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
