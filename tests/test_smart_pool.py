"""The eval pool's promise: a hung or crashing candidate costs its own reward, never the step.
pytest tests/test_smart_pool.py   (starts a local Ray with 2 CPUs)"""

import os
import time

import pytest

ray = pytest.importorskip("ray")

from kbencheval.dataset import Problem  # noqa: E402
from kbencheval.eval.result import EvalResult, Status  # noqa: E402
from smart.config import RewardConfig  # noqa: E402
from smart.reward.pool import EvalPool  # noqa: E402


@ray.remote(num_cpus=0)
class FakeWorker:
    """Stands in for EvalWorker: the text says what the 'candidate' does."""

    def __init__(self, eval_fields):
        pass

    def evaluate(self, problem, text, backend):
        if text == "hang":
            time.sleep(600)
        if text == "crash":
            os._exit(1)
        return EvalResult(status=Status.CORRECT, problem=problem.key, compiled=True, correct=True).to_dict()

    def close(self):
        pass


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_hung_and_crashed_candidates_cost_only_their_own_reward(local_ray):
    problem = Problem(level=1, problem_id=1, name="ReLU", source="")
    pool = EvalPool(RewardConfig(num_workers=2, timeout_s=3.0), worker_cls=FakeWorker)
    t0 = time.monotonic()
    results = pool.evaluate([(problem, t) for t in ["ok", "hang", "ok", "crash", "ok"]], backend="triton")
    elapsed = time.monotonic() - t0
    assert [r["status"] for r in results] == ["correct", "timeout", "correct", "runtime_error", "correct"]
    assert "reward.timeout_s=3" in results[1]["error"]
    assert pool.replaced == 2
    assert elapsed < 30  # the hang was cut at its deadline, not waited out
    # the replaced workers serve the next batch
    assert [r["status"] for r in pool.evaluate([(problem, "ok")] * 3, backend="triton")] == ["correct"] * 3
    pool.close()
