"""The eval pool: Ray actors around kbencheval's Evaluator, with a per-candidate deadline.

    pool = EvalPool(RewardConfig(num_workers=2, timeout_s=60))
    results = pool.evaluate([(problem, llm_text), ...], backend="triton")   # EvalResult dicts, in order

The Evaluator already sandboxes and times out candidates; the pool's deadline is the outer guard for
anything that still hangs or kills a worker. Such a candidate gets a `timeout` / `runtime_error`
result, its worker is replaced, and the rest of the step goes on.
"""

from __future__ import annotations

import os
import time

import ray

from kbencheval.dataset import Problem
from kbencheval.eval.result import EvalResult, Status
from smart.config import RewardConfig


@ray.remote(num_cpus=0)
class EvalWorker:
    def __init__(self, eval_fields: dict):
        if str(eval_fields.get("device", "cpu")).startswith("cpu"):
            os.environ["TRITON_INTERPRET"] = "1"  # Triton kernels run under the interpreter on CPU
        from kbencheval.config import from_dict
        from kbencheval.eval.harness import EvalConfig, Evaluator

        self.evaluator = Evaluator(from_dict(EvalConfig, eval_fields, where="reward.eval"))
        self.evaluator.__enter__()

    def evaluate(self, problem: Problem, text: str, backend: str) -> dict:
        return self.evaluator.evaluate(problem, text, backend=backend).to_dict()

    def close(self) -> None:
        self.evaluator.__exit__(None, None, None)


class EvalPool:
    def __init__(self, cfg: RewardConfig, slots: list | None = None, worker_cls=EvalWorker):
        """`slots`: placement-group slots for GPU eval workers (one per worker); None on CPU."""
        self.cfg, self.worker_cls, self.slots = cfg, worker_cls, slots
        self.workers = [self._spawn(i) for i in range(cfg.num_workers)]
        self.replaced = 0  # workers killed for a deadline or a crash, over the pool's life

    def _spawn(self, i: int):
        options = self.slots[i].options() if self.slots else {"num_gpus": 0}
        return self.worker_cls.options(**options).remote(dict(self.cfg.eval))

    def _replace(self, i: int) -> None:
        ray.kill(self.workers[i], no_restart=True)
        self.workers[i] = self._spawn(i)
        self.replaced += 1

    def evaluate(self, jobs: list[tuple[Problem, str]], backend: str) -> list[dict]:
        results: list[dict | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))[::-1]
        inflight: dict = {}  # ref -> (job index, worker index, deadline)
        idle = list(range(len(self.workers)))
        while pending or inflight:
            while pending and idle:
                j, w = pending.pop(), idle.pop()
                problem, text = jobs[j]
                ref = self.workers[w].evaluate.remote(problem, text, backend)
                inflight[ref] = (j, w, time.monotonic() + self.cfg.timeout_s)
            wait_s = max(0.0, min(d for _, _, d in inflight.values()) - time.monotonic())
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=wait_s)
            for ref in ready:
                j, w, _ = inflight.pop(ref)
                try:
                    results[j] = ray.get(ref)
                    idle.append(w)
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
                    cause = next((line for line in reversed(str(e).strip().splitlines()) if line.strip()), "")
                    results[j] = _failure(jobs[j][0], Status.RUNTIME_ERROR,
                                          f"eval worker crashed: {type(e).__name__}: {cause[:300]}")
                    self._replace(w)
                    idle.append(w)
            now = time.monotonic()
            for ref, (j, w, deadline) in list(inflight.items()):
                if now >= deadline:
                    inflight.pop(ref)
                    results[j] = _failure(
                        jobs[j][0], Status.TIMEOUT, f"evaluation took longer than reward.timeout_s={self.cfg.timeout_s:g}s"
                    )
                    self._replace(w)
                    idle.append(w)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=30)
            except Exception:  # a worker that cannot close is killed below anyway
                pass
            ray.kill(w)


def _failure(problem: Problem, status: Status, error: str) -> dict:
    feedback = {
        Status.TIMEOUT: "Your kernel did not finish within the time limit. Make sure every loop terminates.",
        Status.RUNTIME_ERROR: "Evaluating your kernel crashed the evaluator.",
    }[status]
    return EvalResult(status=status, problem=problem.key, error=error, feedback=feedback).to_dict()
