"""The eval pool's promise: a hung or crashing candidate costs its own reward, never the step.
pytest tests/smart/test_smart_pool.py   (starts a local Ray with 2 CPUs)"""

import os
import time

import pytest

ray = pytest.importorskip("ray")

from kbencheval.dataset import Problem  # noqa: E402
from kbencheval.eval import EvalConfig  # noqa: E402
from kbencheval.eval import EvalResult, Status  # noqa: E402
from kbencheval.eval.pool import PoolError  # noqa: E402
from smart.config import RewardConfig  # noqa: E402
from smart.reward.pool import reward_pool  # noqa: E402


@ray.remote(num_cpus=0)
class FakeWorker:
    """Stands in for the Evaluators' actor: the text says what the 'candidate' does."""

    def __init__(self, eval_cfg, evaluators=1):
        self.limit = eval_cfg.timeout_s  # the evaluator's own per-candidate limit

    def evaluate(self, problem, text, backend):
        if text == "hang":
            time.sleep(600)
        if text == "sleep":  # says when it ran, so a test can see two of them overlap
            start = time.time()
            time.sleep(2.0)
            return EvalResult(status=Status.CORRECT, problem=problem.key, compiled=True, correct=True,
                              checks={"ran": [start, time.time()]})
        if text.startswith("nap:"):  # takes that long, and says when it started
            start = time.time()
            time.sleep(float(text.split(":", 1)[1]))
            return EvalResult(status=Status.CORRECT, problem=problem.key, checks={"started": start})
        if text.startswith("slow_first_time:"):  # still running when its neighbour's deadline replaces the worker
            marker = text.split(":", 1)[1]
            if not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(600)
        if text == "crash":
            os._exit(1)
        if text == "slow":  # the evaluator's own timeout fires at its limit, a little later than asked
            time.sleep(self.limit + 0.5)
            return EvalResult(status=Status.TIMEOUT, problem=problem.key, error=f"evaluator limit {self.limit:g}s")
        checks = {"harness_restarts": {"fork_server": 1, "judge": 2}} if text == "restarted" else {}
        return EvalResult(status=Status.CORRECT, problem=problem.key, compiled=True, correct=True, checks=checks)

    def close(self):
        pass


@ray.remote(num_cpus=0)
class SlowStartWorker:
    """A worker whose start takes eval_cfg.timeout_s (like Evaluators coming up), then scores every candidate correct."""

    def __init__(self, eval_cfg, evaluators=1):
        time.sleep(eval_cfg.timeout_s)

    def evaluate(self, problem, text, backend):
        return EvalResult(status=Status.CORRECT, problem=problem.key, compiled=True, correct=True)

    def close(self):
        pass


@ray.remote(num_cpus=0)
class BrokenStartWorker:
    def __init__(self, eval_cfg, evaluators=1):
        raise RuntimeError("no CUDA device")

    def evaluate(self, problem, text, backend):
        raise AssertionError("unreachable: the start failed")


def test_a_candidates_deadline_starts_when_its_worker_has_started(local_ray):
    """A real worker's Evaluators take seconds to start; a candidate waiting on that start is not late."""
    problem = Problem(level=1, problem_id=1, name="ReLU", source="")
    pool = reward_pool(RewardConfig(eval_actors=1, eval=EvalConfig(timeout_s=3.0), deadline_margin_s=0.0),
                    actor_cls=SlowStartWorker)  # starts in 3 s; each candidate's deadline is 3 s
    results = pool.evaluate([(problem, "ok")] * 2, backend="triton")
    assert [r.status.value for r in results] == ["correct"] * 2 and pool.replaced == 0
    pool.close()


@pytest.mark.parametrize("worker_cls, limit_s, error", [
    (BrokenStartWorker, 60.0, r"evaluator host 0 \(cpu\) failed to start: .*no CUDA device"),
    (SlowStartWorker, 2.0, r"evaluator host 0 \(cpu\) did not start within reward.actor_start_timeout_s = 2s"),
])
def test_an_actor_that_cannot_start_stops_the_step_with_its_cause(local_ray, worker_cls, limit_s, error):
    problem = Problem(level=1, problem_id=1, name="ReLU", source="")
    pool = reward_pool(RewardConfig(eval_actors=1, eval=EvalConfig(timeout_s=30.0), actor_start_timeout_s=limit_s),
                    actor_cls=worker_cls)
    t0 = time.monotonic()
    with pytest.raises(PoolError, match=error):
        pool.evaluate([(problem, "ok")], backend="triton")
    assert time.monotonic() - t0 < limit_s + 10  # not the whole 30 s start
    for host in pool.hosts:
        host.abandon()


def test_hung_and_crashed_candidates_cost_only_their_own_reward(local_ray):
    problem = Problem(level=1, problem_id=1, name="ReLU", source="")
    pool = reward_pool(RewardConfig(eval_actors=2, eval=EvalConfig(timeout_s=2.0), deadline_margin_s=1.5), actor_cls=FakeWorker)
    t0 = time.monotonic()
    results = pool.evaluate([(problem, t) for t in ["ok", "hang", "ok", "crash", "ok"]], backend="triton")
    elapsed = time.monotonic() - t0
    assert [r.status.value for r in results] == ["correct", "timeout", "correct", "runtime_error", "correct"]
    assert "3.5s" in results[1].error  # eval.timeout_s + deadline_margin_s
    assert pool.replaced == 2
    assert elapsed < 30  # the hang was cut at its deadline, not waited out
    # the replaced workers serve the next batch
    assert [r.status.value for r in pool.evaluate([(problem, "ok")] * 3, backend="triton")] == ["correct"] * 3
    pool.close()


def test_the_problems_slowest_so_far_start_first(local_ray):
    quick, slow = (Problem(level=1, problem_id=i, name=n, source="") for i, n in ((1, "Quick"), (2, "Slow")))
    pool = reward_pool(RewardConfig(eval_actors=1, eval=EvalConfig(timeout_s=30.0)), actor_cls=FakeWorker)
    pool.evaluate([(Problem(level=1, problem_id=3, name="Warm", source=""), "ok")], backend="triton")  # the actor's start
    jobs = [(quick, "nap:0.05"), (slow, "nap:0.6")]
    first = pool.evaluate(jobs, backend="triton")  # nothing known yet: the order given
    assert first[0].checks["started"] < first[1].checks["started"]
    second = pool.evaluate(jobs, backend="triton")  # the slow one goes first, results stay in job order
    assert [r.problem for r in second] == [quick.key, slow.key]
    assert second[1].checks["started"] < second[0].checks["started"]
    pool.close()


@ray.remote(num_cpus=0)
class CountingWorker:
    """Says, in each verdict, how many candidates it has judged so far."""

    def __init__(self, eval_cfg, evaluators=1):
        self.judged = 0

    def evaluate(self, problem, text, backend):
        self.judged += 1
        return EvalResult(status=Status.CORRECT, problem=problem.key, checks={"judged": self.judged})

    def close(self):
        pass


def test_the_same_code_for_the_same_problem_is_judged_once(local_ray):
    relu, tanh = (Problem(level=1, problem_id=i, name=n, source="") for i, n in ((1, "ReLU"), (2, "Tanh")))
    pool = reward_pool(RewardConfig(eval_actors=1, eval=EvalConfig(timeout_s=30.0)), actor_cls=CountingWorker)
    code = "```python\nclass ModelNew: pass\n```"
    # the same code in other prose is the same kernel; another problem, other code or no code block is not
    jobs = [(relu, code), (relu, f"Here it is:\n{code}\nDone."), (tanh, code), (relu, code),
            (relu, code.replace("pass", "x = 1")), (relu, "I cannot write this kernel.")]
    results = pool.evaluate(jobs, backend="triton")
    assert [r.problem for r in results] == [relu.key, relu.key, tanh.key, relu.key, relu.key, relu.key]
    judged = [r.checks["judged"] for r in results]
    assert judged[0] == judged[1] == judged[3] and len(set(judged)) == 4
    assert results[3] is not results[0] and pool.metrics()["eval/deduplicated"] == 2.0  # a copy each
    pool.close()


def test_pool_reports_harness_restarts(local_ray):
    problem = Problem(level=1, problem_id=1, name="ReLU", source="")
    pool = reward_pool(RewardConfig(eval_actors=1, eval=EvalConfig(timeout_s=30.0)), actor_cls=FakeWorker)
    assert pool.metrics()["eval/harness_restarts"] == 0
    pool.evaluate([(problem, "restarted"), (problem, "restarted")], backend="triton")  # cumulative counts
    assert pool.metrics() == {"eval/workers_replaced": 0.0, "eval/deduplicated": 1.0, "eval/harness_restarts": 3.0}
    pool.close()


def test_a_slow_candidate_gets_the_evaluators_clean_timeout(local_ray):
    problem = Problem(level=1, problem_id=1, name="ReLU", source="")
    pool = reward_pool(RewardConfig(eval_actors=1, eval=EvalConfig(timeout_s=1.0), deadline_margin_s=5.0), actor_cls=FakeWorker)
    [slow, ok] = pool.evaluate([(problem, "slow"), (problem, "ok")], backend="triton")
    assert slow.status.value == "timeout" and slow.error == "evaluator limit 1s"  # the evaluator's verdict
    assert ok.status.value == "correct" and pool.replaced == 0  # and its worker lived on
    pool.close()



def test_lanes_overlap_candidates_and_a_replaced_worker_reruns_its_bystanders(local_ray, tmp_path):
    """evaluators_per_actor=2: two candidates run at once on one actor; when one hangs and the actor
    is replaced, the candidate beside it is not blamed: it runs again and gets its own verdict."""
    problem, other = Problem(level=1, problem_id=1, name="ReLU", source=""), Problem(level=1, problem_id=2, name="Tanh", source="")
    # Deadlines (5 s) far above the 2 s sleeps: on a loaded CI machine the worker's start and dispatch
    # took over a second, and a 2 s deadline on a 1 s sleep timed out.
    cfg = RewardConfig(eval_actors=1, evaluators_per_actor=2, eval=EvalConfig(timeout_s=3.0), deadline_margin_s=2.0)
    pool = reward_pool(cfg, actor_cls=FakeWorker)
    both = pool.evaluate([(problem, "sleep"), (other, "sleep")], backend="triton")  # two problems: no shared verdict
    assert [r.status.value for r in both] == ["correct"] * 2
    [first, second] = [r.checks["ran"] for r in both]
    assert max(first[0], second[0]) < min(first[1], second[1])  # side by side: each started before the other ended
    results = pool.evaluate([(problem, "hang"), (problem, f"slow_first_time:{tmp_path / 'ran'}")], backend="triton")
    assert [r.status.value for r in results] == ["timeout", "correct"] and pool.replaced == 1
    pool.close()
