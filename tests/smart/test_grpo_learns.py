"""GRPO moves the policy towards what its reward pays for: the whole RL path (engine sampling, trainer
logprobs, group advantages, the clipped loss, AdamW, weight sync to the engine) on a reward that only a
learning trainer can raise. A sign error, logprobs scored on the wrong tokens or a weight sync that never
reaches the engine leaves the reward flat.   pytest -m slow tests/smart/test_grpo_learns.py (local Ray, 2 CPUs)"""

from __future__ import annotations

import pytest

from tests.support import REPO

LOW_IDS = 64  # of the tiny model's 1,024: a random policy writes ~6% of its tokens from these


def low_id_share(cfg, samples) -> list[float]:
    """Reward plugin: the share of a reply's tokens whose id is below LOW_IDS (no evaluator in the signal)."""
    return [sum(t < LOW_IDS for t in s.response_token_ids) / max(1, len(s.response_token_ids)) for s in samples]


@pytest.mark.slow
def test_grpo_raises_the_reward_it_is_paid(tmp_path, local_ray, tiny_model):
    from smart.config import RLConfig, load_config
    from smart.tracking import load_rollouts
    from smart.train import train

    cfg = load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", [
        f"model_path={tiny_model}", f"out_dir={tmp_path / 'rl'}", "num_steps=24", "save_every=0",
        "rollout.max_turns=1", "rollout.prompts_per_step=2", "rollout.n_samples_per_prompt=8",
        "rollout.max_new_tokens=8", "rollout.filter_fn=", "normalize_std=false",
        "reward.reward_fn=tests.smart.test_grpo_learns:low_id_share", "train.lr=1e-2", "train.dtype=fp32"])
    train(cfg)
    per_step = [[s.reward for s in load_rollouts(path)] for path in sorted((tmp_path / "rl" / "rollouts").glob("step_*.jsonl"))]
    assert len(per_step) == 24
    first, last = (sum(sum(r) for r in steps) / sum(len(r) for r in steps) for steps in (per_step[:3], per_step[-3:]))
    assert first < 0.2 and last > 0.5, [round(sum(r) / len(r), 2) for r in per_step]
