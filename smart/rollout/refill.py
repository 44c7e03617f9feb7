"""Dynamic sampling that refills the batch: groups the filter drops are replaced by new prompts,
for at most `max_rounds` extra rounds (SLIME's over-sampling; DAPO's dynamic sampling).

    kept, everything, metrics = fill_groups(draw, filter_fn, want=prompts_per_step, max_rounds=2)

`draw(n)` returns the rewarded samples of n new prompts (group_index distinct from earlier draws) and metrics.
"""

from __future__ import annotations

from typing import Callable

from smart.rollout.filters import filter_groups, groups_of
from smart.sample import Sample

# Per-round metrics that add up over rounds; every other rollout metric describes the first round.
_ADDITIVE = ("time/", "rollout/generated_tokens", "eval/shared_verdicts")


def fill_groups(draw: Callable[[int], tuple[list[Sample], dict]], filter_fn, want: int,
                max_rounds: int, group_by: str = "trajectory") -> tuple[list[Sample], list[Sample], dict]:
    """(kept samples of at most `want` prompts, all samples drawn, metrics). The filter judges GRPO
    groups (`group_by`); the batch size counts prompts (group_index)."""
    everything, metrics = draw(want)
    kept, dropped = filter_groups(everything, filter_fn, group_by)
    rounds = prompts = 0
    while filter_fn is not None and rounds < max_rounds and len(groups_of(kept)) < want:
        missing = want - len(groups_of(kept))  # prompts
        more, more_metrics = draw(missing)
        rounds, prompts = rounds + 1, prompts + missing
        everything += more
        more_kept, more_dropped = filter_groups(more, filter_fn, group_by)
        kept += more_kept
        dropped += more_dropped
        for key, value in more_metrics.items():
            if key.startswith(_ADDITIVE):
                metrics[key] = metrics.get(key, 0.0) + value
    prompts_kept = list(groups_of(kept).values())[:want]  # a round overshoots only if draw returns extra prompts
    kept = [s for g in prompts_kept for s in g]
    return kept, everything, metrics | {
        "filter/dropped_groups": float(dropped),
        "filter/kept_prompts": float(len(prompts_kept)),
        "filter/kept_samples": float(len(kept)),
        "filter/refill_rounds": float(rounds),
        "filter/refill_prompts": float(prompts),
        "filter/missing_prompts": float(max(0, want - len(prompts_kept))),
    }
