"""Scalars describing one step's rollouts: reward stats, verdict rates, speedups, per-turn rates."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

from kbencheval.eval import EvalResult, Status
from smart.sample import Sample, SampleStatus


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}/mean": statistics.fmean(values),
        f"{prefix}/std": statistics.pstdev(values),
        f"{prefix}/min": min(values),
        f"{prefix}/max": max(values),
    }


def verdict_rates(prefix: str, results: list[EvalResult | None]) -> dict[str, float]:
    """Compile/correct/rejected/format-error shares; a missing verdict counts as none of them."""
    n = max(len(results), 1)
    statuses = Counter(r.status for r in results if r is not None)
    return {
        f"{prefix}compile_rate": sum(bool(r and r.compiled) for r in results) / n,
        f"{prefix}correct_rate": sum(bool(r and r.correct) for r in results) / n,
        f"{prefix}rejected_rate": statuses[Status.REJECTED] / n,
        f"{prefix}format_error_rate": statuses[Status.FORMAT_ERROR] / n,
    }


def _rates(prefix: str, samples: list[Sample]) -> dict[str, float]:
    return verdict_rates(prefix, [s.eval_result for s in samples])


def rollout_metrics(samples: list[Sample]) -> dict[str, float]:
    m: dict[str, float] = {"rollout/samples": float(len(samples))}
    m.update(_stats("reward", [s.reward for s in samples if s.reward is not None]))
    m.update(_stats("reward/turn_reward", [s.turn_reward for s in samples if s.turn_reward is not None]))
    m.update(_rates("eval/", samples))
    speedups = [float(s.eval_result.speedup) for s in samples
                if s.eval_result and s.eval_result.correct and s.eval_result.speedup is not None]
    m.update(_stats("eval/speedup", speedups))
    if speedups:
        m["eval/fast_1_rate"] = sum(x > 1.0 for x in speedups) / len(samples)
    by_turn: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        by_turn[s.turn].append(s)
    if len(by_turn) > 1 or 0 not in by_turn:
        for t, group in sorted(by_turn.items()):
            m.update(_rates(f"turn{t}/", group))
            m[f"turn{t}/samples"] = float(len(group))
    lengths = [sum(s.loss_mask) for s in samples]
    m.update(_stats("rollout/response_tokens", [float(x) for x in lengths]))
    m["rollout/truncated_rate"] = sum(s.status == SampleStatus.TRUNCATED for s in samples) / max(len(samples), 1)
    m["rollout/failed"] = float(sum(s.status == SampleStatus.FAILED for s in samples))
    return m
