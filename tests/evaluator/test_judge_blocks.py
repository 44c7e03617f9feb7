"""What the judge's allocator keeps on the device between one candidate's comparisons, and when it
gives it back (Compare.trim, Release(keep_problem=True)), and how often it waits for the device while it
compares (once per request). The GPU side of the blocks is in tests/evaluator/test_gpu_harness.py."""

from __future__ import annotations

import pytest

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval.contract.protocol import Compare, Release, Status


def test_the_judge_keeps_free_blocks_only_between_one_candidates_comparisons():
    """Every comparison but a candidate's last leaves the judge's free blocks for the next (inside the
    candidate's reservation); a candidate that ends early has them given back by a Release of its own."""
    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    wrong = relu.solution_source.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.0) + 1.0")
    cfg = EvalConfig(device="cpu", trials=2, timing_on_cpu=True, iters=10, warmup=1, timeout_s=120)
    with Evaluator(cfg) as ev:
        sent, call = [], ev.judge_call
        ev.judge_call = lambda msg: (sent.append(msg), call(msg))[1]
        assert ev.evaluate(relu, "```python\n" + relu.solution_source + "```").status == Status.CORRECT
        compares = [m for m in sent if isinstance(m, Compare)]
        assert len(compares) > 3 and [c.trim for c in compares] == [False] * (len(compares) - 1) + [True]
        assert not any(isinstance(m, Release) for m in sent)
        sent.clear()
        assert ev.evaluate(relu, "```python\n" + wrong + "```").status == Status.INCORRECT
        assert [type(m).__name__ for m in sent][-2:] == ["Compare", "Release"]
        assert not sent[-2].trim and sent[-1] == Release(keep_problem=True)
    with Evaluator(EvalConfig(device="cpu", trials=2, timing=False, timeout_s=120)) as ev:
        sent, call = [], ev.judge_call
        ev.judge_call = lambda msg: (sent.append(msg), call(msg))[1]
        assert ev.evaluate(relu, "```python\n" + relu.solution_source + "```").status == Status.CORRECT
        compares = [m for m in sent if isinstance(m, Compare)]  # untimed: the last trial's comparison gives them back
        assert [c.trim for c in compares] == [False] * (len(compares) - 1) + [True]
        assert not any(isinstance(m, Release) for m in sent)


def test_timed_outputs_are_judged_against_the_judges_timer_not_a_second_input_set(tmp_path):
    """A picked timed output's reference comes from the judge's timer (its static buffers), the same values
    a fresh reference call gives, without that call's inputs and outputs beside the timer's."""
    import torch

    from kbencheval.eval.trusted.judge import Judge
    from kbencheval.eval.contract.protocol import OutputItem, Prepare, TimeReference, TimingSpec, Trial
    from kbencheval.eval.contract.transfer import export_tensors

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
        return reply.results[0].ok

    assert torch.equal(judge.timed_reference(picked)[0], fresh[0])
    assert judged(fresh) and not judged([fresh[0] + 0.01])
    assert fresh_calls == []


def test_the_judge_reads_a_requests_numbers_back_once(tmp_path, monkeypatch):
    """Every picked output's comparison, digest and digest bounds are queued and read back together (a
    read waits for the device's time slice), and the verdicts still come in order up to the first wrong."""
    import torch

    from kbencheval.eval.trusted import judge as judge_module
    from kbencheval.eval.contract.inputs import output_digest
    from kbencheval.eval.trusted.judge import Judge
    from kbencheval.eval.contract.protocol import OutputItem, Prepare, TimeReference, TimingSpec, Trial
    from kbencheval.eval.contract.transfer import export_tensors

    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    judge = Judge(torch.device("cpu"))
    judge.prepare(Prepare(problem_source=relu.source, sizes={"batch_size": 3, "dim": 5000},
                          model_seeds={"init": 1, "model": 2}, trials=[Trial(seed=3)]))
    judge.time_reference(TimeReference(spec=TimingSpec(warmup=1, iters=2), trials=[Trial(seed=4)], setup=True))
    picks, seeds = [Trial(seed=s) for s in (21, 22, 23)], [31, 33, 35]
    outs = [[t.clone() for t in judge.timed_reference(trial)] for trial in picks]

    def request(outputs: list, tag: str) -> Compare:
        items = [OutputItem(trial=t, desc=export_tensors(o, str(tmp_path), f"{tag}{n}"))
                 for n, (t, o) in enumerate(zip(picks, outputs))]
        return Compare(job_dir=str(tmp_path), phase="timed_outputs", tolerance={}, expected=picks, items=items,
                       committed=[output_digest(o, s).tolist() for o, s in zip(outputs, seeds)], digest_seeds=seeds)

    right, wrong = request(outs, "right"), request([outs[0], [outs[1][0] + 1.0], outs[2]], "wrong")
    extra = request([outs[0], outs[1] + outs[1], outs[2]], "extra")  # two outputs where the reference has one
    reads, tolist = [], torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(self.numel()) or tolist(self))
    assert [r.ok for r in judge.compare(right).results] == [True] * 3
    assert len(reads) == 1 and reads[0] > 3 * 3  # the comparisons' numbers, the digests and their bounds
    reads.clear()
    results = judge.compare(wrong).results
    assert [r.ok for r in results] == [True, False] and "mismatch" in results[1].message and len(reads) == 1
    digested, digest = [], judge_module.output_digest
    monkeypatch.setattr(judge_module, "output_digest", lambda got, seed: digested.append(seed) or digest(got, seed))
    results = judge.compare(extra).results
    assert [r.ok for r in results] == [True, False] and results[1].message == "expected 1 outputs, got 2"
    assert digested == [seeds[0], seeds[2]]  # none of an output laid out unlike the reference's


@pytest.mark.gpu
def test_the_judge_waits_for_the_gpu_once_per_request_of_timed_outputs(monkeypatch):
    """On the GPU: eight picked outputs recomputed by the judge's CUDA graph and checked against
    the candidate's (their comparisons, digests and bounds) cost one wait for the device and the
    final sync, as torch's sync debug mode counts them. The candidate's memory is handed over as it is,
    without CUDA IPC (a process cannot map its own export), so releasing it costs no wait here."""
    import warnings

    import torch

    from kbencheval.eval.trusted import judge as judge_module
    from kbencheval.eval.contract.inputs import output_digest
    from kbencheval.eval.contract.protocol import OutputItem, Prepare, TimeReference, TimingSpec, Trial

    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    judge = judge_module.Judge(torch.device("cuda"))
    judge.prepare(Prepare(problem_source=relu.source, sizes={"batch_size": 16, "dim": 1 << 16},
                          model_seeds={"init": 1, "model": 2}, trials=[Trial(seed=3)]))
    judge.time_reference(TimeReference(spec=TimingSpec(warmup=1, iters=2), trials=[Trial(seed=4)], setup=True))
    assert judge.timer.graph is not None  # the picks are recomputed into the same static buffers
    picks, seeds = [Trial(seed=20 + n) for n in range(8)], [31 + 2 * n for n in range(8)]
    outs = {n: [t.clone() for t in judge.timed_reference(trial)] for n, trial in enumerate(picks)}
    outs[5] = [outs[5][0] + 1.0]  # a wrong one: the verdicts stop there
    monkeypatch.setattr(judge_module, "import_tensors", lambda desc, job_dir: outs[desc["n"]])
    msg = Compare(job_dir="/nonexistent", phase="timed_outputs", tolerance={}, expected=picks,
                  items=[OutputItem(trial=t, desc={"n": n}) for n, t in enumerate(picks)],
                  committed=[output_digest(outs[n], s).tolist() for n, s in enumerate(seeds)], digest_seeds=seeds)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reply = judge.compare(msg)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [w for w in caught if "synchroniz" in str(w.message)]
    assert [r.ok for r in reply.results] == [True] * 5 + [False], reply
    assert 1 <= len(waits) <= 2, [str(w.message) for w in waits]
