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
        compares = [m for m in sent if isinstance(m, Compare)]  # untimed: the last trial's comparison gives them back
        assert [c.trim for c in compares] == [False] * (len(compares) - 1) + [True]
        assert not any(isinstance(m, Release) for m in sent)


def test_timed_outputs_are_judged_against_the_judges_timer_not_a_second_input_set(tmp_path):
    """A picked timed output's reference comes from the judge's timer (its static buffers), the same values
    a fresh reference call gives, without that call's inputs and outputs beside the timer's."""
    import torch

    from kbencheval.eval.judge import Judge
    from kbencheval.eval.protocol import OutputItem, Prepare, TimeReference, TimingSpec, Trial
    from kbencheval.eval.transfer import export_tensors

    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    judge = Judge(torch.device("cpu"))
    judge.prepare(Prepare(problem_source=relu.source, sizes={"batch_size": 3, "dim": 700},
                          model_seeds={"init": 1, "model": 2}, trials=[Trial(seed=3)]))
    judge.time_reference(TimeReference(spec=TimingSpec(warmup=1, iters=2), trials=[Trial(seed=4)], setup=True))
    picked = Trial(seed=9)
    fresh = judge.reference(picked, cache=False)
    fresh_calls = []
    judge.reference = lambda trial, cache=True: fresh_calls.append(trial)  # any fresh call would show here

    def judged(outputs: list) -> bool:
        item = OutputItem(trial=picked, desc=export_tensors(outputs, str(tmp_path), f"t{len(fresh_calls)}"))
        reply = judge.compare(Compare(job_dir=str(tmp_path), phase="timed_outputs", tolerance={}, expected=[picked],
                                      items=[item]))
        return reply["results"][0]["ok"]

    assert torch.equal(judge.timed_reference(picked)[0], fresh[0])
    assert judged(fresh) and not judged([fresh[0] + 0.01])
    assert fresh_calls == []
