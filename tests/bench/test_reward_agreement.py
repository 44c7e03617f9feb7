"""benchmarks/reward_agreement.py on the CPU: the distinct kernels of saved rollouts judged again, and a
recorded verdict that the evaluator does not confirm counted as a disagreement.
    pytest tests/bench/test_reward_agreement.py"""

from __future__ import annotations

import json

from kbencheval.dataset import BUNDLED_ROOT, load_bundled
from kbencheval.eval import EvalResult, Status
from smart.sample import Sample
from smart.tracking import save_rollouts
from tests.support import REPO

RELU = next(p for p in load_bundled(1) if p.problem_id == 1)


def test_recorded_rewards_are_judged_again_and_disagreements_counted(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("reward_agreement", REPO / "benchmarks" / "reward_agreement.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    honest = "```python\n" + RELU.solution_source + "```"
    wrong = "```python\n" + RELU.solution_source.replace("tl.maximum(x, 0.0)", "x") + "```"
    assert wrong != honest
    samples = [Sample(index=i, problem_key=RELU.key, response_text=text,
                      eval_result=EvalResult(status=Status.CORRECT, problem=RELU.key))  # both recorded correct
               for i, text in enumerate([honest, wrong, honest])]  # the repeat is judged once
    save_rollouts(tmp_path / "rollouts" / "step_00000.jsonl", samples)
    out = tmp_path / "agreement.json"
    assert bench.main([str(tmp_path / "rollouts"), "--problems", str(BUNDLED_ROOT), "--modes", "interpreter",
                       "--cpu-evaluators", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["candidates"] == 2 and report["modes"]["interpreter"]["statuses"] == ["correct", "incorrect"]
    assert report["agreement"]["recorded_vs_interpreter"] == {"n": 2, "agree": 1, "rate": 0.5,
                                                            "correct_here_not_there": 1, "correct_there_not_here": 0}
