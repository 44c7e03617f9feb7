"""The evaluator's trusted pieces in isolation: typed protocol, judge comparison by dtype, exact items,
run-time seeds, and EvalConfig's validation."""

from __future__ import annotations

import dataclasses
import time
import types
from pathlib import Path

import pytest
import torch

from kbencheval.eval import EvalConfig
from kbencheval.eval.contract.inputs import STRESS, make_inputs, stress_names
from kbencheval.eval.trusted.compare import check_items, compare
from kbencheval.eval.contract.protocol import (Failure, OutputItem, Outputs, ProtocolError, Ready, RunPhase, Status,
                                               Trial, decode, encode)
from kbencheval.eval.contract.seeds import STRESS_NAMES, RunSeeds


def test_messages_round_trip_and_bad_ones_are_protocol_errors():
    msg = Outputs(phase="trials", items=[OutputItem(trial=Trial(seed=3, stress="x10"), desc={"kind": "file"})])
    assert decode(encode(msg)) == msg
    request = RunPhase(phase="trials", trials=[Trial(seed=1), Trial(seed=2, stress="shift+3")])
    assert decode(encode(request)) == request
    assert decode(encode(Ready())) == Ready()
    for line in (b"not json", b'{"type": "done"}', b'{"type": "outputs", "phase": "trials"}',
                 encode(Failure(status=Status.CORRECT, error=""))):
        with pytest.raises(ProtocolError):
            decode(line)


def test_integers_and_bools_are_compared_exactly():
    ref = [torch.arange(100, dtype=torch.int64)]
    assert compare(ref, [ref[0].clone()], {})[0]
    off_by_one = ref[0].clone()
    off_by_one[7] += 1
    ok, message, _ = compare(ref, [off_by_one], {"atol": 10.0, "rtol": 1.0})  # tolerances do not apply
    assert not ok and "exact" in message
    assert not compare([torch.ones(4, dtype=torch.bool)], [torch.zeros(4, dtype=torch.bool)], {})[0]


def test_nan_and_inf_must_sit_where_the_reference_has_them():
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert compare([ref], [ref.clone()], {})[0]
    for bad in ([1.0, 0.0, float("inf"), -float("inf")],   # NaN replaced by a number
                [1.0, float("nan"), -float("inf"), -float("inf")],  # wrong infinity
                [float("nan"), float("nan"), float("inf"), -float("inf")]):  # NaN where finite
        assert not compare([ref], [torch.tensor(bad)], {})[0], bad


def test_stress_trials_scale_the_absolute_tolerance_with_the_output():
    ref = torch.full((8,), 1e4)
    got = ref + 0.5  # 5e-5 relative: inside rtol on its own; the scaled atol only helps near-zero elements
    assert compare([ref], [got], {}, scale_atol=True)[0]
    near_zero_ref = torch.tensor([1e4, 0.0])
    assert compare([near_zero_ref], [torch.tensor([1e4, 0.3])], {}, scale_atol=True)[0]
    assert not compare([near_zero_ref], [torch.tensor([1e4, 0.3])], {}, scale_atol=False)[0]


def test_judge_demands_exactly_the_requested_trials():
    asked = [Trial(seed=1), Trial(seed=2), Trial(seed=3, stress="x10")]
    item = lambda t: OutputItem(trial=t, desc={})  # noqa: E731
    assert check_items(asked, [item(t) for t in reversed(asked)]) == ""
    assert check_items(asked, []) != ""  # the empty-list forgery
    assert check_items(asked, [item(t) for t in asked[:2]]) != ""
    assert check_items(asked, [item(t) for t in asked + asked[:1]]) != ""  # a trial twice
    assert check_items(asked, [item(t) for t in asked[:2]] + [item(Trial(seed=3))]) != ""  # stress dropped


def test_seeds_are_drawn_at_run_time_and_reproducible_on_request():
    a, b = (RunSeeds.draw(trials=3, timing_sets=4) for _ in range(2))
    assert a.trials != b.trials and a.model != b.model
    c, d = (RunSeeds.draw(trials=3, timing_sets=4, seed=7) for _ in range(2))
    assert c == d and c.record() == d.record()
    assert len(c.trials) == 3 and len(c.timing) == 4 and [t.stress for t in c.stress] == list(STRESS_NAMES)
    assert tuple(STRESS) == STRESS_NAMES


def test_stress_inputs_transform_only_floating_tensors():
    class Problem:
        @staticmethod
        def get_inputs():
            return [torch.randn(64), torch.randint(0, 5, (64,)), 3]

    base = make_inputs(Problem, Trial(seed=5), torch.device("cpu"))
    scaled = make_inputs(Problem, Trial(seed=5, stress="x100"), torch.device("cpu"))
    assert torch.allclose(scaled[0], base[0] * 100) and torch.equal(scaled[1], base[1]) and scaled[2] == 3


def test_stress_transforms_fresh_inputs_in_place_and_never_the_problems_own_tensors():
    kept = torch.randn(16)  # module-level state a get_inputs may return: must never change
    before = kept.clone()
    made = []

    def get_inputs():
        fresh = torch.randn(16)
        made.append(fresh.data_ptr())
        return [fresh, kept, kept, torch.randn(32)[:16]]

    problem = type("Problem", (), {"get_inputs": staticmethod(get_inputs)})
    base = make_inputs(problem, Trial(seed=5), torch.device("cpu"))
    shifted = make_inputs(problem, Trial(seed=5, stress="shift+3"), torch.device("cpu"))
    assert shifted[0].data_ptr() == made[-1]  # no second copy of a fresh input
    assert all(torch.allclose(s, b + 3.0) for s, b in zip(shifted, base))
    assert torch.equal(kept, before) and shifted[1] is not kept
    assert "shift-3" not in stress_names("positive") and stress_names("none") == []
    assert stress_names("unit_scale") == ["x0.01"]
    with pytest.raises(ValueError, match="INPUT_DOMAIN"):
        stress_names("negative")


def test_eval_config_validate_names_the_fix_and_never_mutates():
    cfg = EvalConfig(device="cuda")
    snapshot = dataclasses.asdict(cfg)
    cfg.validate()
    assert dataclasses.asdict(cfg) == snapshot and cfg.device_index == "cuda:0"
    for bad, key in ((dict(device="tpu"), "device"), (dict(trials=0), "trials"), (dict(iters=0), "iters"),
                     (dict(timing_input_sets=1), "timing_input_sets"), (dict(timeout_s=0), "timeout_s"),
                     (dict(min_iters=0), "min_iters"), (dict(timing_target_rse=-0.1), "timing_target_rse")):
        with pytest.raises(ValueError, match=key):
            EvalConfig(**bad)
    with pytest.raises(TypeError):
        EvalConfig("cpu")  # keyword-only


@pytest.mark.slow
def test_evaluator_records_its_seeds_and_shares_batch_seeds():
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import Evaluator

    relu = next(p for p in load_bundled(1) if p.problem_id == 1)
    text = "```python\n" + relu.solution_source + "```"
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False)) as ev:
        first, second = ev.evaluate(relu, text), ev.evaluate(relu, text)
        assert first.correct and second.correct
        assert first.checks["seeds"] != second.checks["seeds"]  # drawn per evaluation
        batch = ev.new_batch_seeds()
        shared = [ev.evaluate(relu, text, seeds=batch).checks["seeds"] for _ in range(2)]
        assert shared[0] == shared[1] == batch.record()
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False, seed=11)) as ev:
        assert ev.evaluate(relu, text).checks["seeds"] == RunSeeds.draw(trials=1, timing_sets=8, seed=11).record()


def _bare_session():
    from kbencheval.eval.trusted.session import Session

    session = Session.__new__(Session)
    session.checks = {}
    return session


def _round(new_events_s: float, new_wall_s: float) -> dict:
    # Reference: 5 x 1 ms of events in a 7 ms round (2 ms loop overhead).
    return {"ref_wall_s": 0.007, "ref_events_s": 0.005, "new_wall_s": new_wall_s, "new_events_s": new_events_s}


def test_the_wall_clock_bounds_the_candidates_event_figures():
    from kbencheval.eval.trusted.session import Verdict

    session = _bare_session()
    session.check_wall_bound([_round(0.025, 0.027)] * 4)  # honest: 25 ms of events in a 27 ms round
    with pytest.raises(Verdict, match="contradicted by the harness's clock in 4 of 4 rounds") as caught:
        session.check_wall_bound([_round(0.0001, 0.027)] * 4)  # claims 0.1 ms for the same rounds
    assert caught.value.result.status == Status.REJECTED


def test_one_round_slowed_by_the_host_is_noise_but_most_rounds_are_not():
    from kbencheval.eval.trusted.session import Verdict

    session = _bare_session()
    honest, slowed = _round(0.004, 0.006), _round(0.004, 0.066)  # 60 ms of host delay in one round
    session.check_wall_bound([honest, slowed, honest, honest])
    with pytest.raises(Verdict, match="3 of 4 rounds"):
        session.check_wall_bound([honest, slowed, slowed, slowed])
    with pytest.raises(Verdict, match="1 of 1 rounds"):
        session.check_wall_bound([slowed])


def test_a_time_below_the_physical_floor_is_rejected():
    from kbencheval.eval import EvalResult
    from kbencheval.eval.trusted.session import Verdict

    io_bytes, bandwidth_gbs = 2 * 10**9, 2000.0  # 2 GB at 2 TB/s: 1000 µs
    _bare_session().check_floor(EvalResult(Status.CORRECT, runtime_us=900.0), io_bytes, bandwidth_gbs)
    with pytest.raises(Verdict, match="physical floor"):
        _bare_session().check_floor(EvalResult(Status.CORRECT, runtime_us=100.0), io_bytes, bandwidth_gbs)


def test_cpu_threads_reach_the_candidates_process():
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    probe = relu.solution_source + "\nimport torch as _t\nassert _t.get_num_threads() == 1, _t.get_num_threads()\n"
    with Evaluator(EvalConfig(device="cpu", trials=1, cpu_threads=1, timeout_s=60)) as ev:
        result = ev.evaluate(relu, "```python\n" + probe + "```")
    assert result.status == Status.CORRECT, result.error


def test_the_harness_runs_the_stress_trials_of_the_problems_input_domain():
    # The harness once kept its own copy of the domain table without unit_scale: on the H100 the
    # unit_scale problems still got x100 trials and their honest TF32 solutions failed.
    import dataclasses as dc

    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    text = "```python\n" + relu.solution_source + "```"
    with Evaluator(EvalConfig(device="cpu", trials=1, timeout_s=60)) as ev:
        for domain in ("unit_scale", "positive", "none"):
            result = ev.evaluate(dc.replace(relu, input_domain=domain), text)
            assert result.status == Status.CORRECT, result.error
            assert result.checks["stress_trials"] == stress_names(domain), domain


def test_a_workers_message_cannot_write_the_harnesss_checks():
    from kbencheval.eval.contract.protocol import Outputs
    from kbencheval.eval.trusted.session import HARNESS_KEYS

    session = _bare_session()
    session.checks = {"timing_rounds": ["the harness's"], "correctness_trials": [{"ok": False}]}
    session.compiled, session.watchdog = True, None
    forged = {key: "forged" for key in HARNESS_KEYS} | {"correctness_trials": [{"ok": True}], "phases_s": {"load_s": 1.0}}
    session.conn = types.SimpleNamespace(recv=lambda: Outputs(phase="trials", items=[], checks=forged))
    session.expect(Outputs, "trials")
    assert session.checks["phases_s"] == {"load_s": 1.0}  # the worker's own figures are kept
    assert session.checks["timing_rounds"] == ["the harness's"] and session.checks["correctness_trials"] == [{"ok": False}]
    assert not set(HARNESS_KEYS) - {"timing_rounds"} & set(session.checks)


@pytest.mark.parametrize("per_request, batches", [(8, [8]), (3, [3, 3, 2]), (1, [1] * 8)])
def test_trials_stream_one_at_a_time_and_timed_outputs_are_recomputed_after_the_exclusive_rounds(
        monkeypatch, per_request, batches):
    """Each correctness trial is asked for and judged alone (the worker and judge hold one trial's tensors),
    the judge comparing one while the worker runs the next; each round's picked outputs are recomputed and
    judged after the rounds, `per_request` at a time (as many as fit rounds.TIMED_BATCH_BYTES), each
    against the digest the worker sent in its round, sharing the device."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval.trusted import harness
    from kbencheval.eval import EvalConfig, Evaluator
    from tests.support import record_requests

    monkeypatch.setattr(harness, "timed_outputs_per_request", lambda output_bytes: per_request)
    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    cfg = EvalConfig(device="cpu", trials=3, timing_on_cpu=True, iters=20, warmup=1, timeout_s=120,
                     judge_cache_gb=0.0)  # 0: every reference is recomputed
    with Evaluator(cfg) as ev:
        order, compares = record_requests(monkeypatch, ev)  # what the worker and the judge were asked, in turn
        result = ev.evaluate(relu, "```python\n" + relu.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    trials = [c for c in compares if c.phase == "trials"]
    assert len(trials) == 3 + len(result.checks["stress_trials"]) and all(len(c.items) == 1 for c in trials)
    timed = [c for c in compares if c.phase == "timed_outputs"]
    assert len(result.checks["timing_rounds"]) == 4  # 20 iterations: two picks a round, 8 in all
    assert [len(c.items) for c in timed] == [len(c.committed) for c in timed] == batches
    assert len({seed for c in timed for seed in c.digest_seeds}) == 4  # each held to its own round's digest
    assert len({item.trial for c in timed for item in c.items}) == 8  # each a different iteration
    assert [c.trim for c in timed] == [False] * (len(batches) - 1) + [True]
    gate = result.checks["device_gate"]
    assert gate["timing_setup"]["end"] <= gate["timing"]["start"] and gate["timing"]["end"] <= gate["timed_outputs"]["start"]
    # One hold per trial, and one for the last one's comparison: a timer may go between them ...
    assert len(gate["trials"]["holds"]) == len(trials) + 1
    asked = [trial for side, phase, trial in order if side == "worker" and phase == "trials"]
    assert [step for step in order if step[1] == "trials"][:5] == [
        ("worker", "trials", asked[0]), ("worker", "trials", asked[1]), ("judge", "trials", asked[0]),
        ("worker", "trials", asked[2]), ("judge", "trials", asked[1])]  # each judged while the next runs
    assert [step[2] for step in order if step[:2] == ("judge", "trials")] == asked  # every one, in order
    # ... one per request of picked outputs, and one for both timers, which are built at once
    assert len(gate["timed_outputs"]["holds"]) == len(timed) and len(gate["timing_setup"]["holds"]) == 1
    # The judge builds its timer while the worker builds its own.
    assert [step[0] for step in order if step[1] == "timing_setup"] == ["worker", "judge"]


def test_evaluators_start_side_by_side_each_with_its_own_fork_server():
    from kbencheval.eval.trusted.harness import start_evaluators

    evaluators = start_evaluators(EvalConfig(device="cpu", trials=1), 2)
    try:
        time.sleep(0.5)  # a server tied to a finished thread (PDEATHSIG) would be dead by now
        pids = {ev.process_ids()["fork_server"] for ev in evaluators}
        assert len(evaluators) == 2 and len(pids) == 2
        assert all(ev.fork_server_alive() for ev in evaluators)
    finally:
        for ev in evaluators:
            ev.close()


def test_one_evaluator_that_cannot_start_closes_the_others(monkeypatch):
    from kbencheval.eval.trusted import harness

    made = []

    class Flaky:
        def __init__(self, cfg, wait_ready=True):
            assert wait_ready is False  # every server starts before any is waited for
            self.closed, self.fails = False, len(made) == 1
            made.append(self)

        def wait_ready(self):
            if self.fails:
                raise harness.HarnessError("fork server failed to start")

        def close(self):
            self.closed = True

    monkeypatch.setattr(harness, "Evaluator", Flaky)
    with pytest.raises(harness.HarnessError, match="fork server failed to start"):
        harness.start_evaluators(EvalConfig(device="cpu"), 3)
    assert len(made) == 3 and all(ev.closed for ev in made)


def test_the_judge_lets_go_of_a_problem_when_asked():
    from kbencheval.eval.trusted.judge import Judge
    from kbencheval.eval.contract.protocol import Prepare, Release, TimeReference, TimingSpec, encode
    from kbencheval.eval.contract.judge_replies import JudgeReply

    source = (Path(__file__).resolve().parents[2] / "kbencheval/problems/level1/1_ReLU.py").read_text()
    judge = Judge(torch.device("cpu"))
    prep = judge.prepare(Prepare(problem_source=source, sizes={"batch_size": 2, "dim": 8},
                                 model_seeds={"init": 1, "model": 2}, trials=[Trial(seed=3)]))
    assert prep.ok and prep.output_bytes == [2 * 8 * 4] and judge.refs
    judge.time_reference(TimeReference(spec=TimingSpec(warmup=1, iters=2), trials=[Trial(seed=4)], setup=True))
    assert judge.timer is not None
    assert decode(encode(Release(keep_problem=True))) == Release(keep_problem=True)
    assert judge.release(Release(keep_problem=True)) == JudgeReply()  # only the allocator's free blocks
    assert judge.timer is not None and judge.refs
    assert judge.release(Release()) == JudgeReply()
    assert judge.timer is None and not judge.refs


def test_a_timed_output_must_be_the_one_whose_digest_came_with_its_round(tmp_path):
    """The lazy forger: wrong (fast) outputs in the timed calls, then the right answer computed for the
    picked inputs once the pick is known. Its digest, sent inside the round, gives it away."""
    from kbencheval.eval.contract.inputs import output_digest
    from kbencheval.eval.trusted.judge import Judge
    from kbencheval.eval.contract.protocol import Compare, Prepare
    from kbencheval.eval.contract.transfer import export_tensors

    source = (Path(__file__).resolve().parents[2] / "kbencheval/problems/level1/1_ReLU.py").read_text()
    judge = Judge(torch.device("cpu"))
    judge.prepare(Prepare(problem_source=source, sizes={"batch_size": 3, "dim": 5000}, model_seeds={"init": 1, "model": 2},
                          trials=[Trial(seed=3)]))
    picked = Trial(seed=9)
    right = judge.reference(picked, cache=False)
    item = OutputItem(trial=picked, desc=export_tensors(right, str(tmp_path), "timed1"))
    honest = Compare(job_dir=str(tmp_path), phase="timed_outputs", tolerance={}, expected=[picked], items=[item],
                     committed=[output_digest(right, 77).tolist()], digest_seeds=[77])
    assert judge.compare(honest).results[0].ok
    timed_wrong = [torch.relu(right[0]) * 0.5]  # what the timed calls really produced
    lazy = dataclasses.replace(honest, committed=[output_digest(timed_wrong, 77).tolist()])
    assert "differs from the one whose digest the worker sent in its round" in judge.compare(lazy).protocol_error
    assert decode(encode(honest)).committed == honest.committed  # the digest crosses the pipe intact

    # Several picks in one request, each from its own round: each item is held to its own digest and seed.
    picks = [Trial(seed=s) for s in (21, 22, 23)]
    outs = [judge.reference(t, cache=False) for t in picks]
    items = [OutputItem(trial=t, desc=export_tensors(o, str(tmp_path), f"timed{2 + n}"))
             for n, (t, o) in enumerate(zip(picks, outs))]
    seeds = [31, 33, 35]
    batch = Compare(job_dir=str(tmp_path), phase="timed_outputs", tolerance={}, expected=picks, items=items,
                    committed=[output_digest(o, s).tolist() for o, s in zip(outs, seeds)], digest_seeds=seeds)
    assert [r.ok for r in judge.compare(batch).results] == [True] * 3
    lazy_second = list(batch.committed)
    lazy_second[1] = output_digest([outs[1][0] * 0.5], seeds[1]).tolist()  # the middle pick was timed wrong
    for forged in (dataclasses.replace(batch, committed=lazy_second),
                   dataclasses.replace(batch, digest_seeds=[31, 35, 33])):  # a digest held to another round's seed
        assert "differs from the one whose digest" in judge.compare(forged).protocol_error
    swapped = dataclasses.replace(batch, items=[items[1], items[0], items[2]])  # each output under another's digest
    assert "in another order than requested" in judge.compare(swapped).protocol_error


def test_output_digests_are_stable_and_see_any_real_change():
    from kbencheval.eval.contract.inputs import DIGEST_BLOCKS, digest_bounds, digests_match, output_digest

    x = torch.randn(3, 5000)  # not a multiple of the digest's width: the tail counts too
    labels = torch.randint(0, 10, (7,))
    base = output_digest([x, labels], 5).tolist()
    assert output_digest([x.clone(), labels.clone()], 5).tolist() == base and len(base) == 2 * DIGEST_BLOCKS
    bounds = digest_bounds([x, labels])
    nudged = x.clone()
    nudged[-1, -1] += 0.1  # one element of the tail
    assert not digests_match(base, output_digest([nudged, labels], 5).tolist(), bounds)
    assert not digests_match(base, output_digest([x, labels + 1], 5).tolist(), bounds)
    assert digests_match([float("nan")], [float("nan")]) and not digests_match([1.0], [float("nan")])
    assert not digests_match([float("inf")], [1.0], [float("inf")])  # an infinite bound excuses no infinity
    assert not digests_match(["1.0"], [1.0]) and not digests_match(base, base[:1], bounds)


def test_a_recomputed_output_may_round_differently_but_not_be_computed_differently():
    """Timed outputs are recomputed for the judge: a nondeterministic kernel (atomics) rounds a few ulps
    differently each run and must still match its round's digest; the same values in bf16 precision, or
    a few elements skipped, must not."""
    from kbencheval.eval.contract.inputs import digest_bounds, digests_match, output_digest

    def match(committed, recomputed) -> bool:
        return digests_match(output_digest([committed], 11).tolist(), output_digest([recomputed], 11).tolist(),
                             digest_bounds([recomputed]))

    torch.manual_seed(0)
    exact = torch.randn(1000, 4096) * 3
    skipped = exact.clone()
    skipped[500, :64] = 0
    assert match(exact * (1 + 4 * torch.finfo(torch.float32).eps * torch.randn_like(exact)), exact)
    assert not match(exact.bfloat16().float(), exact) and not match(skipped, exact)
    halves = exact.half()  # a 16-bit output gets its own rounding allowance, and still no skipped elements
    assert match((halves.float() * (1 + 1e-3 * torch.randn_like(exact))).half(), halves)
    assert not match(skipped.half(), halves)


def test_every_judge_reply_is_typed_and_crosses_the_pipe_whole():
    from kbencheval.eval.contract.protocol import Compare, Prepare, Release, TimeReference, TimingSpec
    from kbencheval.eval.contract.judge_replies import (Compared, JudgeReply, Prepared, ReferenceTimed, TrialVerdict,
                                                        decode_reply, encode_reply)

    sent = [(Prepare(problem_source="", sizes={}, model_seeds={}, trials=[]),
             Prepared(device_name="cpu", output_bytes=[64], input_bytes=32, not_finite=["s3"], reserved_bytes=None)),
            (Compare(job_dir="", phase="trials", tolerance={}, expected=[], items=[]),
             Compared(results=[TrialVerdict(trial="s3", ok=False, message="mismatch", stats={"max_abs": 0.5})],
                      parts_s={"import_s": 0.1}, reserved_bytes=1 << 20)),
            (TimeReference(spec=TimingSpec(), trials=[]), ReferenceTimed(ref_us=[1.5, 2.0], mechanism="cuda_graph")),
            (Release(), JudgeReply(ok=False, error="OutOfMemoryError: CUDA out of memory"))]
    for request, reply in sent:
        assert decode_reply(request, encode_reply(reply)) == reply
    with pytest.raises(ValueError, match="the judge's reply to Release does not fit JudgeReply"):
        decode_reply(Release(), b'{"ok": true, "ref_us": [1.0]}')  # a field the reply does not declare
