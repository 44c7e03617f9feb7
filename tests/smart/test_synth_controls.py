"""The shuffled-reward control of the learning run: same rewards, detached from the samples."""

from __future__ import annotations

from kbencheval.eval import EvalResult, Status
from smart.config import RewardConfig, load_plugin
from smart.reward.presets import preset_rewards
from smart.sample import Sample


def _samples(n: int) -> list[Sample]:
    out = []
    for i in range(n):
        status = Status.CORRECT if i % 3 == 0 else Status.COMPILE_ERROR if i % 3 == 1 else Status.FORMAT_ERROR
        result = EvalResult(status, compiled=status != Status.FORMAT_ERROR, correct=status == Status.CORRECT,
                            speedup=1.0 + i / 10 if status == Status.CORRECT else None)
        out.append(Sample(index=i, group_index=i // 4, eval_result=result))
    return out


def test_shuffled_rewards_are_a_seeded_permutation_of_the_preset():
    fn = load_plugin("smart.reward.controls:shuffled_preset_rewards", "reward.reward_fn")
    cfg, samples = RewardConfig(), _samples(24)
    honest, shuffled = preset_rewards(cfg, samples), fn(cfg, samples)
    assert sorted(shuffled) == sorted(honest) and shuffled != honest
    assert fn(cfg, samples) == shuffled  # a replayed step gets the same permutation
