"""Training math, pure torch: losses (SFT, GRPO), group advantages, discounted returns."""

from smart.algo.advantages import discounted_returns, group_advantages
from smart.algo.logprobs import chunked_logprobs, place
from smart.algo.losses import aggregate, entropy_from_logits, grpo_loss, sft_loss, token_logprobs

__all__ = [
    "aggregate",
    "chunked_logprobs",
    "discounted_returns",
    "entropy_from_logits",
    "group_advantages",
    "grpo_loss",
    "place",
    "sft_loss",
    "token_logprobs",
]
