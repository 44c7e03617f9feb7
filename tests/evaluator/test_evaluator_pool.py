"""The EvaluatorPool in this process (placement=local): the same promises as the Ray reward pool
(tests/smart/test_smart_pool.py), kept by the same scheduler: a hung or crashed worker costs only its own
candidate, a worker that cannot start stops the call with its cause, verdicts come back in job order.
The Evaluators here are fakes whose candidate text says what to do; one test judges real candidates."""

from __future__ import annotations

import threading
import time

import pytest

from kbencheval.dataset import load_problems
from kbencheval.eval import EvalConfig, EvalResult, Status
from kbencheval.eval.pool import EvaluatorPool, PoolError
from kbencheval.eval.pool.core import HOST_CRASHED
from kbencheval.eval.pool.hosts import LocalHost
from kbencheval.dataset import Problem

PROBLEM = Problem(level=1, problem_id=1, name="ReLU", source="")


class FakeEvaluator:
    closed = 0

    def __init__(self, cfg):
        self.cfg, self.release = cfg, threading.Event()

    def evaluate(self, problem, text, backend=None):
        if text == "hang":  # stuck until the pool gives up on the worker and closes this evaluator
            self.release.wait(60)
            return EvalResult(status=Status.CORRECT, problem=problem.key)
        if text == "harness_fails":
            raise RuntimeError("fork server died twice")
        if text.startswith("nap:"):
            start = time.time()
            time.sleep(float(text[4:]))
            return EvalResult(status=Status.CORRECT, problem=problem.key, checks={"ran": [start, time.time()]})
        return EvalResult(status=Status.CORRECT, problem=problem.key, checks={"evaluator": id(self)})

    def close(self):
        FakeEvaluator.closed += 1
        self.release.set()


def fake_start(cfg, count):
    return [FakeEvaluator(cfg) for _ in range(count)]


def local_fakes(start=fake_start, lanes=1):
    return lambda i, cfg: LocalHost(cfg, lanes, start=start)


def test_a_hung_and_a_crashed_worker_cost_only_their_own_candidate():
    pool = EvaluatorPool(EvalConfig(device="cpu", timeout_s=1.0), ["cpu", "cpu"], deadline_margin_s=0.5,
                         make_host=local_fakes())
    closed_before = FakeEvaluator.closed
    t0 = time.monotonic()
    results = pool.evaluate([(PROBLEM, t) for t in ["ok", "hang", "ok", "harness_fails", "ok"]])
    assert [r.status.value for r in results] == ["correct", "timeout", "correct", "runtime_error", "correct"]
    assert "eval.timeout_s + deadline_margin_s = 1.5s" in results[1].error and results[1].checks["pool"] == "deadline"
    assert results[3].checks["pool"] == HOST_CRASHED and "fork server died twice" in results[3].error
    assert pool.replaced == 2 and time.monotonic() - t0 < 20
    assert FakeEvaluator.closed >= closed_before + 1  # the hung lane's evaluator was closed, which freed it
    assert [r.status.value for r in pool.evaluate([(PROBLEM, "ok")] * 3)] == ["correct"] * 3  # replacements serve
    pool.close()


def test_a_worker_that_cannot_start_stops_the_call_with_its_cause():
    def broken(cfg, count):
        raise RuntimeError("no CUDA device")

    pool = EvaluatorPool(EvalConfig(device="cpu"), ["cpu"], make_host=local_fakes(broken),
                         start_timeout_key="reward.actor_start_timeout_s")
    with pytest.raises(PoolError, match=r"evaluator host 0 \(cpu\) failed to start: RuntimeError: no CUDA device"):
        pool.evaluate([(PROBLEM, "ok")])

    def slow(cfg, count):
        time.sleep(5)
        return fake_start(cfg, count)

    pool = EvaluatorPool(EvalConfig(device="cpu"), ["cpu"], host_start_timeout_s=0.5, make_host=local_fakes(slow),
                         start_timeout_key="reward.actor_start_timeout_s")
    with pytest.raises(PoolError, match=r"did not start within reward.actor_start_timeout_s = 0.5s"):
        pool.evaluate([(PROBLEM, "ok")])


def test_verdicts_stream_in_arrival_order_and_return_in_job_order_and_copies_are_copies():
    pool = EvaluatorPool(EvalConfig(device="cpu"), ["cpu"], evaluators_per_host=2, make_host=local_fakes(lanes=2))
    other = Problem(level=1, problem_id=2, name="Tanh", source="")
    code = "```python\nclass ModelNew: pass\n```"
    heard = []
    results = pool.evaluate([(PROBLEM, "nap:0.6"), (other, "nap:0.05"), (PROBLEM, code), (PROBLEM, f"see:\n{code}")],
                            on_result=lambda i, r: heard.append(i))
    assert [r.problem for r in results] == [PROBLEM.key, other.key, PROBLEM.key, PROBLEM.key]
    assert heard.index(1) < heard.index(0)  # the short one was heard first: two lanes ran side by side
    assert sorted(heard) == [0, 1, 2, 3] and pool.deduplicated == 1
    assert results[2].checks == results[3].checks and results[2] is not results[3]
    pool.close()


def test_without_dedupe_every_sample_is_judged():
    pool = EvaluatorPool(EvalConfig(device="cpu"), ["cpu"], dedupe=False, make_host=local_fakes())
    code = "```python\nclass ModelNew: pass\n```"
    pool.evaluate([(PROBLEM, code)] * 3)
    assert pool.deduplicated == 0
    pool.close()


def test_real_evaluators_judge_a_bundled_solution_and_a_broken_candidate():
    """The default local worker: real Evaluators (fork server, sandbox, judge) on the CPU."""
    [problem] = [p for p in load_problems("bundled", 1) if p.problem_id == 1]
    with EvaluatorPool(EvalConfig(device="cpu", trials=1, timeout_s=120), ["cpu"]) as pool:
        good, broken = pool.evaluate([(problem, f"```python\n{problem.solution_source}\n```"),
                                      (problem, "```python\nclass ModelNew(:\n```")])
    assert good.status == Status.CORRECT, good.error
    assert broken.status == Status.COMPILE_ERROR and "pool" not in broken.checks


def test_placement_and_devices_are_checked():
    with pytest.raises(ValueError, match="placement='k8s': choose local or ray"):
        EvaluatorPool(EvalConfig(device="cpu"), ["cpu"], placement="k8s")
    with pytest.raises(ValueError, match="at least one device"):
        EvaluatorPool(EvalConfig(device="cpu"), [])


def test_an_unreachable_ray_cluster_is_one_clear_error_not_a_wait():
    pytest.importorskip("ray")
    from kbencheval.bench.config import EvaluatorPoolConfig
    from kbencheval.config import ConfigError
    from tests.support import free_port

    cfg = EvaluatorPoolConfig(placement="ray", device="cpu", ray_address=f"127.0.0.1:{free_port()}")
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"ray_address=127.0.0.1:\d+: no Ray head answers there .*ray start --head"):
        cfg.check_placement()
    assert time.monotonic() - t0 < 10
