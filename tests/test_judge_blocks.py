"""What the judge's allocator keeps on the device between one candidate's comparisons, and when it
gives it back (Compare.trim, Release(keep_problem=True)). The GPU side is in tests/test_gpu_harness.py."""

from __future__ import annotations

from kbencheval.dataset import load_bundled
from kbencheval.eval.harness import EvalConfig, Evaluator
from kbencheval.eval.protocol import Compare, Release, Status


def test_the_judge_keeps_free_blocks_only_between_one_candidates_comparisons():
    """Every comparison but a candidate's last leaves the judge's free blocks for the next (inside the
    candidate's reservation); a candidate that ends early has them given back by a Release of its own."""
    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    wrong = relu.solution_source.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) + 1.0")
    cfg = EvalConfig(device="cpu", trials=2, timing_on_cpu=True, iters=10, warmup=1, timeout_s=120)
    with Evaluator(cfg) as ev:
        sent, call = [], ev._judge_call
        ev._judge_call = lambda msg: (sent.append(msg), call(msg))[1]
        assert ev.evaluate(relu, "```python\n" + relu.solution_source + "```").status == Status.CORRECT
        compares = [m for m in sent if isinstance(m, Compare)]
        assert len(compares) > 3 and [c.trim for c in compares] == [False] * (len(compares) - 1) + [True]
        assert not any(isinstance(m, Release) for m in sent)
        sent.clear()
        assert ev.evaluate(relu, "```python\n" + wrong + "```").status == Status.INCORRECT
        assert [type(m).__name__ for m in sent][-2:] == ["Compare", "Release"]
        assert not sent[-2].trim and sent[-1] == Release(keep_problem=True)
    with Evaluator(EvalConfig(device="cpu", trials=2, timing=False, timeout_s=120)) as ev:
        sent, call = [], ev._judge_call
        ev._judge_call = lambda msg: (sent.append(msg), call(msg))[1]
        assert ev.evaluate(relu, "```python\n" + relu.solution_source + "```").status == Status.CORRECT
        assert all(m.trim for m in sent if isinstance(m, Compare)) and not any(isinstance(m, Release) for m in sent)
