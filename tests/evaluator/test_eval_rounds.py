"""Trusted timing's rounds: their sizes, when timing may stop, and how many timed outputs are judged."""

from __future__ import annotations

from kbencheval.eval.contract.protocol import TimingSpec
from kbencheval.eval.sharing.rounds import (JUDGED_TIMED_OUTPUTS, TIMED_BATCH_BYTES, picks_per_round, precise_enough,
                                   round_sizes, timed_outputs_per_request)


def test_timed_iterations_split_into_at_most_twenty_rounds_of_at_least_five():
    assert round_sizes(100) == [5] * 20 and round_sizes(20) == [5] * 4 and round_sizes(7) == [5, 2]
    assert round_sizes(1000) == [50] * 20 and round_sizes(3) == [3]


def test_at_least_eight_timed_outputs_are_judged_however_early_timing_stops():
    for iters, min_iters, target_rse, per_round in ((100, 40, 0.003, 1), (100, 20, 0.003, 2), (20, 40, 0.003, 2),
                                                    (100, 20, 0.0, 1), (1000, 40, 0.003, 2)):
        spec = TimingSpec(iters=iters, min_iters=min_iters, target_rse=target_rse)
        assert picks_per_round(spec) == per_round, (iters, min_iters, target_rse)
        # The earliest stop: min_iters (all iterations when the stop rule is off), at least four rounds.
        stop = min(min_iters, iters) if target_rse else iters
        earliest = [size for n, size in enumerate(round_sizes(iters)) if n < 4 or sum(round_sizes(iters)[:n]) < stop]
        assert sum(min(per_round, size) for size in earliest) >= JUDGED_TIMED_OUTPUTS


def test_small_picked_outputs_are_judged_together_and_large_ones_alone():
    mb = 1 << 20
    assert [timed_outputs_per_request(n * mb) for n in (0, 1, 32, 64, 100, 128, 256, 1536)] == [8, 8, 8, 4, 2, 2, 1, 1]
    for n in range(1, 600, 7):  # every request's outputs fit the budget, or it holds only one
        per_request = timed_outputs_per_request(n * mb)
        assert per_request == 1 or per_request * n * mb <= TIMED_BATCH_BYTES


def _timed(per_round_ratios, size=5):
    """times and rounds as trusted_timing collects them: every pair in a round at the round's ratio."""
    times, rounds = {"ref_us": [], "new_us": []}, []
    for ratio in per_round_ratios:
        times["ref_us"] += [100.0 * ratio] * size
        times["new_us"] += [100.0] * size
        rounds.append({"iters": size})
    return times, rounds


def test_timing_stops_early_only_when_the_speedup_is_already_precise():
    spec = TimingSpec(iters=100, min_iters=40, target_rse=0.003)
    steady = [1.30, 1.301, 1.299, 1.30, 1.302, 1.298, 1.30, 1.30]  # 8 rounds of 5 = 40 iterations
    assert precise_enough(*_timed(steady), spec)
    assert not precise_enough(*_timed(steady[:6]), spec)  # 30 < min_iters
    assert not precise_enough(*_timed(steady + [1.3]), spec)  # an odd number of rounds: orders unbalanced
    noisy = [1.30, 1.36, 1.24, 1.33, 1.27, 1.35, 1.25, 1.30]  # rse ~1.2%: keeps timing
    assert not precise_enough(*_timed(noisy), spec)
    # One outlying round moves neither the median speedup nor the robust spread (by the standard
    # deviation the error would be 2.3%, and timing would go on), but two of eight do.
    assert precise_enough(*_timed(steady[:7] + [1.55]), spec)
    assert not precise_enough(*_timed(steady[:4] + [1.55, 1.05, 1.55, 1.05]), spec)
    assert not precise_enough(*_timed(steady), TimingSpec(iters=100, min_iters=40, target_rse=0.0))  # off
    assert not precise_enough(*_timed(steady), TimingSpec(iters=100, min_iters=100, target_rse=0.003))
