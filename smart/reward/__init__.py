"""Kernel rewards: the eval pool (Ray actors around kbencheval's Evaluator) and shaping presets."""

from smart.reward.presets import PRESETS, preset_rewards, shaped_reward

__all__ = ["PRESETS", "preset_rewards", "shaped_reward"]
