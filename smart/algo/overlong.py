"""What happens to replies that hit max_new_tokens (rollout.overlong).   pytest tests/smart/test_grpo_rollout.py

none:    trained as they are.
mask:    loss_mask all 0 (DAPO's overlong filtering): a cut-off reply is not evidence that its tokens
         were bad, but it still counts in its group's reward statistics.
penalty: DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13) added to the turn reward; with
         L = tokens the model generated this turn, L_max = max_new_tokens, B = overlong_buffer:
         0 for L <= L_max - B, (L_max - B - L) / B * overlong_penalty up to L_max (so -overlong_penalty there).
"""

from __future__ import annotations

from smart.sample import Sample, SampleStatus


def length_penalty(generated: int, max_new_tokens: int, buffer: int, penalty: float) -> float:
    start = max_new_tokens - buffer
    if generated <= start:
        return 0.0
    return -penalty * min(generated - start, buffer) / buffer


def apply_overlong(samples: list[Sample], rewards: list[float], policy: str, max_new_tokens: int,
                   buffer: int = 0, penalty: float = 1.0) -> list[float]:
    """Turn rewards after the overlong policy; `mask` edits the samples' loss masks in place."""
    if policy == "none":
        return list(rewards)
    if policy == "mask":
        for s in samples:
            if s.status == SampleStatus.TRUNCATED:
                s.loss_mask = [0] * len(s.loss_mask)
        return list(rewards)
    if policy == "penalty":
        # loss_mask marks exactly this turn's sampled tokens (earlier turns and glue are 0)
        return [r + length_penalty(sum(s.loss_mask), max_new_tokens, buffer, penalty) for s, r in zip(samples, rewards)]
    raise ValueError(f"rollout.overlong must be none, mask or penalty, got {policy!r}")
