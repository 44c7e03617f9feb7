"""Reward shaping: an EvalResult -> a scalar.   pytest tests/smart/test_smart_reward.py

Presets, all with `rejected` (the candidate broke the rules) strictly lowest:
  tritonforge  0 format/backend failure, 0.05 builds but crashes or hangs, 0.1 runs with wrong output, 0.3 correct,
               + min(speedup - 1, cap) when faster
  kevin        0.3 * correct + speedup * correct                        (Kevin-32B's shaping)
  staged       w_format * formatted + w_compile * compiled + w_correct * correct + w_speed * min(speedup - 1, cap)
  correct      1 if correct else 0: correctness alone (training rewards with timing off); no partial
               credit, so a group's advantages come only from kernels that work
  speed        correct * (1 + min(speedup - 1, cap)): 1 for a correct kernel as fast as the reference, less
               for a slower one, up to 1 + cap; nothing for a failure (the speed stage: no partial credit
               beside it, so a correct slow kernel still beats a broken fast one)
Speedup is None when the device gave no meaningful timing (the CPU interpreter); it then adds nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from kbencheval.eval import EvalResult, Status

if TYPE_CHECKING:
    from smart.config import RewardConfig
    from smart.sample import Sample


def _speedup(result: EvalResult) -> float | None:
    return float(result.speedup) if result.speedup is not None and result.correct else None


def tritonforge_reward(result: EvalResult, cfg: RewardConfig) -> float:
    if result.correct:
        s = _speedup(result)
        return 0.3 + (min(s - 1.0, cfg.speedup_cap) if s is not None and s > 1.0 else 0.0)
    if not result.compiled:
        return 0.0
    # A crash or a hang (wrong forward arity, a Triton compile error at launch) scores below a run with wrong
    # values: with one credit for both, GRPO drifted to crashing kernels (learning run 4,
    # docs/results/learning.md).
    return 0.1 if result.status == Status.INCORRECT else 0.05


def kevin_reward(result: EvalResult, cfg: RewardConfig) -> float:
    if not result.correct:
        return 0.0
    return 0.3 + (_speedup(result) or 0.0)


def staged_reward(result: EvalResult, cfg: RewardConfig) -> float:
    r = 0.0 if result.status == Status.FORMAT_ERROR else cfg.staged_format
    r += cfg.staged_compile * result.compiled
    if result.correct:
        r += cfg.staged_correct
        s = _speedup(result)
        if s is not None and s > 1.0:
            r += cfg.staged_speed * min(s - 1.0, cfg.speedup_cap)
    return r


def correct_reward(result: EvalResult, cfg: RewardConfig) -> float:
    return float(result.correct)


def speed_reward(result: EvalResult, cfg: RewardConfig) -> float:
    if not result.correct:
        return 0.0
    s = _speedup(result)
    return 1.0 if s is None else 1.0 + min(s - 1.0, cfg.speedup_cap)


PRESETS: dict[str, Callable[[EvalResult, "RewardConfig"], float]] = {
    "correct": correct_reward,
    "tritonforge": tritonforge_reward,
    "kevin": kevin_reward,
    "staged": staged_reward,
    "speed": speed_reward,
}


def shaped_reward(result: EvalResult | None, cfg: RewardConfig) -> float:
    """One candidate's reward; a missing result (generation failed) scores like a format error."""
    if result is None:
        result = EvalResult(status=Status.FORMAT_ERROR)
    if result.status == Status.REJECTED:
        return cfg.rejected_reward
    grade = result.checks.get("timing_mode")
    if isinstance(grade, dict) and not grade.get("reward_grade", True):  # e.g. replayed from a comparison run
        raise ValueError(f"a verdict timed with timing_mode={grade.get('mode')} is comparison-only and cannot be "
                         "a reward: evaluate it again with timing_mode=trusted")
    return PRESETS[cfg.preset](result, cfg)


def preset_rewards(cfg: RewardConfig, samples: list[Sample]) -> list[float]:
    """Default reward_fn: the configured preset applied to each sample's eval_result."""
    return [shaped_reward(s.eval_result, cfg) for s in samples]
