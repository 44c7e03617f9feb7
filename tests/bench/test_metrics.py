"""fast_p, pass@k and geomean speedup against values worked out by hand."""

import math

import pytest

from kbencheval.bench.metrics import fast_p, geomean_speedup, mean_pass_at_k, pass_at_k, summarize


def rec(problem, sample, correct, speedup=None, timed=True, status=None, level=1, compiled=None):
    return {
        "problem_key": problem,
        "sample": sample,
        "level": level,
        "status": status or ("correct" if correct else "incorrect"),
        "compiled": correct if compiled is None else compiled,
        "correct": correct,
        "speedup": speedup,
        "timing_meaningful": timed,
    }


def test_pass_at_k_hand_values():
    # n=5, c=2: pass@1 = 1 - C(3,1)/C(5,1) = 1 - 3/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 4, 2) == 1.0  # only one wrong sample: any 2 drawn include a correct one
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 5)


def test_mean_pass_at_k_only_over_problems_with_enough_samples():
    records = [rec("A", i, i < 2) for i in range(5)] + [rec("B", 0, True), rec("B", 1, False)]
    # pass@1: A = 2/5, B = 1/2 -> mean 0.45; pass@5: only A qualifies, n-c=3 < 5 -> 1.0; pass@10: none
    assert mean_pass_at_k(records, 1) == pytest.approx(0.45)
    assert mean_pass_at_k(records, 5) == pytest.approx(1.0)
    assert mean_pass_at_k(records, 10) is None


def test_fast_p_hand_values():
    records = [
        rec("A", 0, True, 2.5),
        rec("B", 0, True, 0.7),
        rec("C", 0, True, 1.2),
        rec("D", 0, False, None),
    ]
    expected = {0: 3 / 4, 0.5: 3 / 4, 0.8: 2 / 4, 1: 2 / 4, 1.5: 1 / 4, 2: 1 / 4}
    for p, value in expected.items():
        assert fast_p(records, p) == pytest.approx(value), p
    assert geomean_speedup(records) == pytest.approx((2.5 * 0.7 * 1.2) ** (1 / 3))


def test_speedup_of_incorrect_sample_never_counts():
    records = [rec("A", 0, False, 9.0, status="incorrect"), rec("B", 0, True, 0.5)]
    assert fast_p(records, 1.0) == 0.0
    assert geomean_speedup(records) == pytest.approx(0.5)


def test_untimed_results_give_no_speedup_numbers():
    # CPU interpreter: correct, but the timing means nothing
    records = [rec("A", 0, True, 3.0, timed=False), rec("B", 0, False, None, timed=False)]
    assert fast_p(records, 0) == pytest.approx(0.5)  # fast_0 is the correct rate
    assert fast_p(records, 1.0) is None
    assert geomean_speedup(records) is None


def test_summarize_per_level_rates():
    records = [
        rec("A", 0, True, 2.0, level=1),
        rec("A", 1, False, status="compile_error", compiled=False, level=1),
        rec("B", 0, False, status="rejected", compiled=True, level=1),
        rec("C", 0, True, 0.5, level=2),
    ]
    s = summarize(records)
    l1 = s["levels"]["1"]
    assert (l1["n_samples"], l1["n_problems"]) == (3, 2)
    assert l1["compiled_rate"] == pytest.approx(2 / 3)
    assert l1["correct_rate"] == pytest.approx(1 / 3)
    assert l1["rejected_rate"] == pytest.approx(1 / 3)
    assert l1["status_counts"]["compile_error"] == 1
    assert s["levels"]["2"]["geomean_speedup"] == pytest.approx(0.5)
    assert s["all"]["geomean_speedup"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert s["all"]["fast_p"]["1"] == pytest.approx(1 / 4)


def test_paired_bootstrap_by_hand():
    from kbencheval.bench.metrics import paired_bootstrap

    same = paired_bootstrap([0.2, 0.5, 0.0], [0.2, 0.5, 0.0])
    assert (same["diff"], same["lo"], same["hi"], same["n"]) == (0.0, 0.0, 0.0, 3)
    shifted = paired_bootstrap([0.0, 0.25, 0.5], [0.125, 0.375, 0.625])  # every problem +0.125: no spread
    assert shifted["diff"] == shifted["lo"] == shifted["hi"] == pytest.approx(0.125)
    # one problem of 20 gains a full point: the mean moves 0.05 and the interval spans 0 (the gain may be luck)
    lucky = paired_bootstrap([0.0] * 20, [1.0] + [0.0] * 19)
    assert lucky["diff"] == pytest.approx(0.05) and lucky["lo"] == 0.0 and 0.05 <= lucky["hi"] <= 0.15
    # pairing: a large shared spread between problems does not widen the interval of a uniform change
    assert paired_bootstrap([0.0, 0.9, 0.1, 0.8], [0.1, 1.0, 0.2, 0.9])["lo"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap([0.1], [0.1, 0.2])
