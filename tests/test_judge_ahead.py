"""The judge computes a trial's reference while the worker computes the candidate's outputs (Reference,
then Compare), and the harness's channel to it stays one request, one reply, whatever fails between."""

from __future__ import annotations

import torch

from kbencheval.eval.harness import EvalConfig, Evaluator
from kbencheval.eval.inputs import make_inputs
from kbencheval.eval.judge import Judge
from kbencheval.eval.protocol import Compare, OutputItem, Prepare, Reference, Trial
from kbencheval.eval.result import Status
from kbencheval.eval.transfer import export_tensors
from tests.test_adversarial import RELU, candidate

SEEDS = {"init": 1, "model": 2}


def test_the_judge_compares_against_the_reference_it_computed_ahead(tmp_path, monkeypatch):
    judge = Judge(torch.device("cpu"))
    judge.prepare(Prepare(problem_source=RELU.source, sizes=RELU.small_sizes, model_seeds=SEEDS, trials=[Trial(seed=3)]))
    timed = Trial(seed=99)  # a timed iteration's inputs: never cached
    assert judge.compute_ahead(Reference(trials=[timed]))["ok"]
    right = [make_inputs(judge.module, timed, torch.device("cpu"))[0].clamp(min=0)]
    item = OutputItem(trial=timed, desc=export_tensors(right, str(tmp_path), "timed1"))

    def no_recompute(*args, **kwargs):
        raise AssertionError("the reference was computed again")

    monkeypatch.setattr(judge, "reference", no_recompute)
    reply = judge.compare(Compare(job_dir=str(tmp_path), phase="timed_outputs", tolerance={}, expected=[timed],
                                  items=[item]))
    assert [r["ok"] for r in reply["results"]] == [True]
    assert judge.ahead == {}  # for that Compare only


def test_a_worker_that_fails_while_the_judge_works_ahead_leaves_the_judge_in_step():
    """The worker dies in its second trial while the judge computes that trial's reference: the reply
    still owed is read before the judge's next request, so the next candidate's prepare gets its own."""
    fails_second = candidate('''
class ModelNew(nn.Module):
    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls == 2:
            raise RuntimeError("second call")
        y = torch.empty_like(x)
        launch_relu(x, y)
        return y
''')
    with Evaluator(EvalConfig(device="cpu", timeout_s=30, trials=2, stress_trials=False)) as ev:
        failed = ev.evaluate(RELU, fails_second)
        assert failed.status == Status.RUNTIME_ERROR and "second call" in failed.error, failed.error
        honest = ev.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
        assert honest.status == Status.CORRECT, honest.error
        assert ev.restarts["judge"] == 0  # in step, not restarted
