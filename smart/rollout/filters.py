"""Group filters (dynamic sampling).   pytest tests/smart/test_smart_filter.py

A filter is `filter_fn(group: list[Sample]) -> bool` (True keeps the group), loaded by dotted path
from `rollout.filter_fn`. A group whose rewards are all equal has zero GRPO advantage everywhere, so
it costs a training pass and teaches nothing (DAPO's dynamic sampling, arXiv 2503.14476).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

from smart.sample import Sample


def keep_varied_rewards(group: list[Sample]) -> bool:
    rewards = {round(float(s.reward), 9) for s in group if s.reward is not None}
    return len(rewards) > 1


def groups_of(samples: list[Sample], by: str = "trajectory") -> dict:
    """GRPO groups. by="trajectory": one per prompt (all turns of its trajectories together);
    by="turn": one per (prompt, turn index), so turn t is compared only with other turns t."""
    if by not in ("trajectory", "turn"):
        raise ValueError(f"group_by must be 'trajectory' or 'turn', got {by!r}")
    groups: dict = defaultdict(list)
    for s in samples:
        groups[s.group_index if by == "trajectory" else (s.group_index, s.turn)].append(s)
    return dict(groups)


def filter_groups(samples: list[Sample], filter_fn: Callable[[list[Sample]], bool] | None,
                  by: str = "trajectory") -> tuple[list[Sample], int]:
    """Keep whole groups that pass `filter_fn`; returns (kept samples, number of groups dropped)."""
    if filter_fn is None:
        return samples, 0
    kept, dropped = [], 0
    for group in groups_of(samples, by).values():
        if filter_fn(group):
            kept += group
        else:
            dropped += 1
    return kept, dropped
