"""The eval pool: Ray actors around kbencheval's Evaluator, with a per-candidate deadline.

    pool = EvalPool(RewardConfig(num_workers=2, eval=EvalConfig(device="cpu", timeout_s=60)))
    results = pool.evaluate([(problem, llm_text), ...], backend="triton")   # EvalResults, in order

The same code for the same problem is judged once per call.

One deadline rule: the per-candidate limit is the evaluator's own (`reward.eval.timeout_s`), and the
pool waits `eval.timeout_s + reward.deadline_margin_s` for a worker. A slow
candidate therefore gets the evaluator's clean `timeout` verdict and its worker lives on; only a
worker that stops answering altogether (a hang the evaluator could not cut, a crash) is replaced,
its candidate scored `timeout` / `runtime_error`, and the rest of the step goes on. A candidate's
deadline starts when its worker has started (its Evaluators take seconds to come up); a worker that
fails to start within `reward.worker_start_timeout_s` stops the step with an error.
"""

from __future__ import annotations

import copy
import math
import os
import queue
import time

import ray

from kbencheval.dataset import Problem
from kbencheval.eval import EvalConfig
from kbencheval.eval import EvalResult, Status
from kbencheval.eval.sharing.schedule import EvalSeconds
from kbencheval.extract import extract_code
from smart.config import RewardConfig


@ray.remote(num_cpus=0)
class EvalWorker:
    """`evaluators` Evaluators on this worker's device, one per concurrent call (the actor's
    max_concurrency); their device gate lets one time at once."""

    def __init__(self, eval_cfg: EvalConfig, evaluators: int = 1):
        eval_cfg.require_reward_grade("reward.eval")  # its verdicts become rewards, however it was made
        if eval_cfg.on_cpu:
            os.environ["TRITON_INTERPRET"] = "1"  # Triton kernels run under the interpreter on CPU
        from kbencheval.eval.config import device_memory_per_evaluator
        from kbencheval.eval.trusted.harness import start_evaluators

        self.evaluators = start_evaluators(device_memory_per_evaluator(eval_cfg, evaluators), evaluators)
        self.free: queue.Queue = queue.Queue()
        for evaluator in self.evaluators:
            self.free.put(evaluator)

    def evaluate(self, problem: Problem, text: str, backend: str) -> EvalResult:
        evaluator = self.free.get()
        try:
            return evaluator.evaluate(problem, text, backend=backend)
        finally:
            self.free.put(evaluator)

    def close(self) -> None:
        for evaluator in self.evaluators:
            evaluator.close()


class EvalPool:
    def __init__(self, cfg: RewardConfig, slots: list | None = None, worker_cls=EvalWorker):
        """`slots`: placement-group slots for GPU eval workers (one per worker); None on CPU."""
        cfg.eval.require_reward_grade("reward.eval")
        self.cfg, self.worker_cls, self.slots = cfg, worker_cls, slots
        self._starting: dict[int, tuple] = {}  # worker index -> (its ready ref, when it was spawned)
        self.workers = [self._spawn(i) for i in range(cfg.num_workers)]
        self.replaced = 0  # workers killed for a deadline or a crash, over the pool's life
        self.deduplicated = 0  # jobs that shared the verdict of the same code on the same problem
        self._restarts = [0] * cfg.num_workers  # fork server + judge restarts inside each worker's Evaluator
        self._retired_restarts = 0
        self.eval_seconds = EvalSeconds()  # per problem, over the pool's life: the longest start first

    def _spawn(self, i: int):
        options = self.slots[i].options() if self.slots else {"num_gpus": 0}
        lanes = self.cfg.evaluators_per_worker
        worker = self.worker_cls.options(**options, max_concurrency=lanes).remote(self.cfg.eval, evaluators=lanes)
        self._starting[i] = (worker.__ray_ready__.remote(), time.monotonic())
        return worker

    def _check_starts(self, ready: list, inflight: dict, wait_for: float) -> None:
        """Workers whose start finished in `ready` begin their candidates' deadlines now; a start that
        failed or ran past its limit stops the step, since no candidate could be scored on that worker."""
        now = time.monotonic()
        for i, (ref, spawned) in list(self._starting.items()):
            if ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise RuntimeError(f"eval worker {i} failed to start: {_last_line(e)}") from None
                del self._starting[i]
                for job, (j, w, _, _) in inflight.items():
                    if w == i:
                        inflight[job] = (j, w, now + wait_for, now)
            elif now - spawned >= self.cfg.worker_start_timeout_s:
                raise RuntimeError(f"eval worker {i} did not start within reward.worker_start_timeout_s = "
                                   f"{self.cfg.worker_start_timeout_s:g}s; raise it or check the worker's log")

    def metrics(self) -> dict[str, float]:
        """Over the pool's life: workers replaced, and processes each Evaluator restarted after they died."""
        return {"eval/workers_replaced": float(self.replaced), "eval/deduplicated": float(self.deduplicated),
                "eval/harness_restarts": float(self._retired_restarts + sum(self._restarts))}

    def _replace(self, i: int, inflight: dict, pending: list, idle: list) -> None:
        """A new worker in slot i. Candidates still running on the old one are not to blame: they go
        back to `pending` and run again on the new worker."""
        for ref, (j, w, _, _) in list(inflight.items()):
            if w == i:
                inflight.pop(ref)
                pending.append(j)
        idle[:] = [w for w in idle if w != i] + [i] * self.cfg.evaluators_per_worker
        self._retired_restarts += self._restarts[i]
        self._restarts[i] = 0
        ray.kill(self.workers[i], no_restart=True)
        self.workers[i] = self._spawn(i)
        self.replaced += 1

    def evaluate(self, jobs: list[tuple[Problem, str]], backend: str) -> list[EvalResult]:
        """One verdict per job, in order. Jobs with the same problem and the same code (as the evaluator
        extracts it) are judged once and share the verdict: a group of samples often repeats a kernel."""
        first_of: dict[tuple, int] = {}
        # a text with no code block keeps its own verdict (a format error that can depend on the text)
        keys = [(problem.key, "code", code) if (code := extract_code(text)) is not None else (problem.key, "text", text)
                for problem, text in jobs]
        unique = [first_of.setdefault(key, j) for j, key in enumerate(keys)]
        todo = sorted(set(unique))
        verdicts = dict(zip(todo, self._evaluate_unique([jobs[j] for j in todo], backend)))
        self.deduplicated += len(jobs) - len(todo)
        return [verdicts[j] if j == u else copy.deepcopy(verdicts[u]) for j, u in enumerate(unique)]

    def _evaluate_unique(self, jobs: list[tuple[Problem, str]], backend: str) -> list[EvalResult]:
        wait_for = self.cfg.eval.timeout_s + self.cfg.deadline_margin_s
        results: list[EvalResult | None] = [None] * len(jobs)
        # A step ends with its last reward: the problems slowest to evaluate so far go first (schedule.py).
        pending = self.eval_seconds.longest_first([problem.key for problem, _ in jobs])[::-1]
        inflight: dict = {}  # ref -> (job index, worker index, deadline, start)
        idle = [w for w in range(len(self.workers)) for _ in range(self.cfg.evaluators_per_worker)]  # free lanes
        while pending or inflight:
            while pending and idle:
                j, w = pending.pop(), idle.pop()
                problem, text = jobs[j]
                ref = self.workers[w].evaluate.remote(problem, text, backend)
                deadline = math.inf if w in self._starting else time.monotonic() + wait_for
                inflight[ref] = (j, w, deadline, time.monotonic())
            limits = [d for _, _, d, _ in inflight.values()]
            limits += [spawned + self.cfg.worker_start_timeout_s for _, spawned in self._starting.values()]
            wait_s = max(0.0, min(limits) - time.monotonic())
            starts = [ref for ref, _ in self._starting.values()]
            ready, _ = ray.wait(list(inflight) + starts, num_returns=1, timeout=wait_s)
            self._check_starts(ready, inflight, wait_for)
            for ref in ready:
                # A worker's start, or a job whose worker was replaced (the job went back to pending).
                if ref not in inflight:
                    continue
                j, w, _, start = inflight.pop(ref)
                try:
                    results[j] = ray.get(ref)
                    self.eval_seconds.record(jobs[j][0].key, time.monotonic() - start)
                    self._restarts[w] = sum(results[j].checks.get("harness_restarts", {}).values())
                    idle.append(w)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
                    if w in self._starting:  # did it fail to start, or start and then crash on this candidate?
                        started, _ = ray.wait([self._starting[w][0]], timeout=30)
                        self._check_starts(started, inflight, wait_for)
                    results[j] = _failure(jobs[j][0], Status.RUNTIME_ERROR, f"eval worker crashed: {_last_line(e)}")
                    self._replace(w, inflight, pending, idle)
            now = time.monotonic()
            for ref, (j, w, deadline, _) in list(inflight.items()):
                if now >= deadline and ref in inflight:
                    inflight.pop(ref)
                    results[j] = _failure(
                        jobs[j][0], Status.TIMEOUT, f"the eval worker did not answer within reward.eval.timeout_s + "
                        f"deadline_margin_s = {wait_for:g}s; worker replaced"
                    )
                    self._replace(w, inflight, pending, idle)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=30)
            except Exception:  # a worker that cannot close is killed below anyway
                pass
            ray.kill(w)


def _failure(problem: Problem, status: Status, error: str) -> EvalResult:
    # No feedback text here: kbencheval.prompts.feedback_message frames the status and error for the model.
    return EvalResult(status=status, problem=problem.key, error=error)


def _last_line(error: Exception) -> str:
    """A Ray error's last non-empty line (its cause), after the error's type."""
    cause = next((line for line in reversed(str(error).strip().splitlines()) if line.strip()), "")
    return f"{type(error).__name__}: {cause[:300]}"
