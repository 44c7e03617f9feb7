"""Reward functions for control runs (issue 13): a gain that survives them is not real learning.

    bash scripts/run_learning.sh configs/learn_synth_gpu.yaml runs/control_shuffled \
        rl.reward.reward_fn=smart.reward.controls:shuffled_preset_rewards

`shuffled_preset_rewards` scores each sample with the configured preset, then permutes the rewards
across the whole step's batch: every reward still comes from a real evaluation (same distribution,
same scale), but it no longer belongs to the sample that earned it, so held-out correctness must not
rise. The permutation is seeded by the batch's sample indices, so a replayed step gets the same one.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from smart.reward.presets import preset_rewards

if TYPE_CHECKING:
    from smart.config import RewardConfig
    from smart.sample import Sample


def shuffled_preset_rewards(cfg: RewardConfig, samples: list[Sample]) -> list[float]:
    rewards = preset_rewards(cfg, samples)
    random.Random(",".join(str(s.index) for s in samples)).shuffle(rewards)
    return rewards


def length_reward(cfg: RewardConfig, samples: list[Sample]) -> list[float]:
    """No evaluator in the signal: a deterministic function of the reply's tokens that differs within a
    group, so every group trains. For tests and timing runs of the machinery, never for learning."""
    return [float(len(s.response_token_ids) % 3) + 0.1 * (s.response_token_ids[-1] % 2) for s in samples]
