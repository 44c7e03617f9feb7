"""GRPO group advantages and multi-turn discounted returns.   pytest tests/smart/test_algo.py"""

from __future__ import annotations

import torch


def group_advantages(
    rewards: torch.Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6, positive_only: bool = False
) -> torch.Tensor:
    """A_i = r_i - mean(group), divided by (std(group) + eps) when normalize_std; negatives set to 0 when
    positive_only.

    `rewards` holds G groups of `group_size` consecutive samples. std is the population std
    (divide by n), so a group of one is defined; a group whose rewards are all equal gets
    advantage 0 whatever normalize_std says. Dropping std normalization follows Dr. GRPO
    (arXiv 2503.20783), which shows it biases towards too-easy and too-hard prompts.
    """
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"{rewards.numel()} rewards do not split into groups of {group_size}; "
            "pass n_samples_per_prompt as group_size and keep each group whole"
        )
    r_GN = rewards.reshape(-1, group_size)
    adv_GN = r_GN - r_GN.mean(dim=1, keepdim=True)
    if normalize_std:
        adv_GN = adv_GN / (r_GN.std(dim=1, keepdim=True, correction=0) + eps)
    if positive_only:  # samples below their group's mean are left alone rather than pushed down
        adv_GN = adv_GN.clamp(min=0.0)
    return adv_GN.reshape(-1)


def discounted_returns(turn_rewards: list[float], gamma: float) -> list[float]:
    """R_t = r_t + gamma * R_{t+1}, computed from the last turn backwards (Kevin-style multi-turn credit)."""
    returns: list[float] = []
    running = 0.0
    for r in reversed(turn_rewards):
        running = float(r) + gamma * running
        returns.append(running)
    return returns[::-1]
