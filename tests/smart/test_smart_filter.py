"""Dynamic-sampling filter and GRPO advantages per group.   pytest tests/smart/test_smart_filter.py"""

import pytest

from smart.rollout.filters import filter_groups, keep_varied_rewards
from smart.sample import Sample
from smart.ray.actor_group import compute_advantages


def group(g, rewards):
    return [Sample(index=10 * g + i, group_index=g, reward=r) for i, r in enumerate(rewards)]


def test_drops_only_groups_with_equal_rewards_and_counts_them():
    samples = group(0, [0.0, 0.0, 0.0]) + group(1, [0.0, 0.3, 0.0]) + group(2, [0.3, 0.3, 0.3]) + group(3, [1.0, 0.1])
    kept, dropped = filter_groups(samples, keep_varied_rewards)
    assert dropped == 2
    assert sorted({s.group_index for s in kept}) == [1, 3]
    assert len(kept) == 5


def test_no_filter_keeps_everything():
    samples = group(0, [0.0, 0.0])
    assert filter_groups(samples, None) == (samples, 0)


def test_advantages_are_normalized_within_each_group_of_any_size():
    # multi-turn groups differ in size: group 0 has 3 samples, group 1 has 2
    samples = group(0, [0.0, 1.0, 2.0]) + group(1, [5.0, 7.0])
    adv = compute_advantages(samples, normalize_std=False)
    assert adv == pytest.approx([-1.0, 0.0, 1.0, -1.0, 1.0])
    adv = compute_advantages(samples, normalize_std=True)
    std0 = (2 / 3) ** 0.5
    assert adv[:3] == pytest.approx([-1 / std0, 0.0, 1 / std0], rel=1e-4)
    assert adv[3:] == pytest.approx([-1.0, 1.0], rel=1e-4)


def test_advantages_of_unrewarded_samples_are_refused_in_one_line():
    # RolloutManager.generate returns samples before reward; training on them must say so, not crash in float(None)
    samples = group(0, [0.0, 1.0]) + group(1, [None, None])
    with pytest.raises(ValueError, match=r"samples \[10, 11\] have no reward.*RolloutManager.rollout"):
        compute_advantages(samples, normalize_std=True)
