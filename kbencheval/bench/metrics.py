"""Benchmark metrics over result records (dicts from results.jsonl: EvalResult fields + keys).

Definitions (docs/benchmark.md has the same text):
- rates (compiled, correct, rejected, per status) are fractions of evaluated samples.
- fast_p = fraction of evaluated samples that are correct AND have speedup > p. With one sample per
  problem this is KernelBench's fast_p (fraction of problems). fast_0 is the correct rate: any
  correct kernel counts, timed or not. For p > 0 a speedup must be measured (`timing_meaningful`);
  if any correct sample has no meaningful timing (e.g. CPU interpreter) fast_p is None, not a guess.
- pass@k = mean over problems with n >= k samples of 1 - C(n-c, k) / C(n, k) (Chen et al. 2021,
  "Evaluating Large Language Models Trained on Code", the unbiased estimator), c = correct samples.
- geomean speedup = exp(mean(log speedup)) over correct samples with a meaningful timing.
- intervals (95%): Wilson score intervals on the rates (samples as independent trials, so optimistic
  when a problem has many samples); percentile bootstrap over problems (samples of a drawn problem move
  together) on fast_p and the geomean speedup. Two runs are compared with paired_bootstrap over the
  problems both evaluated.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Iterable

FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
PASS_AT_K = (1, 5, 10)
STATUSES = ("correct", "incorrect", "timeout", "runtime_error", "compile_error", "rejected", "format_error")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def timed_speedup(record: dict) -> float | None:
    """The speedup of a correct sample if it was measured meaningfully, else None."""
    speedup = record.get("speedup")
    if record.get("correct") and record.get("timing_meaningful") and speedup is not None and speedup > 0:
        return float(speedup)
    return None


def fast_p(records: list[dict], p: float) -> float | None:
    if not records:
        return None
    correct = [r for r in records if r.get("correct")]
    if p == 0:
        return len(correct) / len(records)
    speedups = [timed_speedup(r) for r in correct]
    if any(s is None for s in speedups):
        return None  # some correct kernels were not timed: the fraction would be a guess
    return sum(1 for s in speedups if s > p) / len(records)


def mean_pass_at_k(records: list[dict], k: int) -> float | None:
    """Mean pass@k over problems that have at least k evaluated samples; None if there are none."""
    by_problem: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_problem[r["problem_key"]].append(r)
    values = [
        pass_at_k(len(rs), sum(1 for r in rs if r.get("correct")), k) for rs in by_problem.values() if len(rs) >= k
    ]
    return sum(values) / len(values) if values else None


def geomean_speedup(records: Iterable[dict]) -> float | None:
    speedups = [s for s in map(timed_speedup, records) if s is not None]
    if not speedups:
        return None
    return math.exp(sum(math.log(s) for s in speedups) / len(speedups))


def wilson(successes: int, n: int, z: float = 1.96) -> list[float] | None:
    """95% Wilson score interval [lo, hi] of a rate (Wilson 1927); None for n = 0. Unlike the normal
    approximation it stays inside [0, 1] and is not zero-width at 0 or n successes."""
    if n <= 0:
        return None
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


BOOTSTRAP_RESAMPLES = 2000


def problem_bootstrap(records: list[dict], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                      level: float = 0.95) -> dict:
    """Percentile bootstrap intervals over problems for fast_p (each threshold) and the geomean speedup:
    {"fast_p": {"1": [lo, hi] | None, ...}, "geomean_speedup": [lo, hi] | None}. An interval is None
    where the point value is (untimed correct samples, or nothing timed)."""
    import numpy as np

    by_problem: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_problem[r["problem_key"]].append(r)
    groups = list(by_problem.values())
    out: dict = {"fast_p": {f"{p:g}": None for p in FAST_P_THRESHOLDS}, "geomean_speedup": None}
    if not groups:
        return out
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(groups), size=(resamples, len(groups)))  # one row per resample of problems
    n = np.array([len(g) for g in groups], dtype=float)[draws].sum(axis=1)
    tail = (1 - level) / 2

    def interval(values) -> list[float]:
        lo, hi = np.quantile(values, [tail, 1 - tail])
        return [float(lo), float(hi)]

    for p in FAST_P_THRESHOLDS:
        if fast_p(records, p) is None:
            continue
        hits = np.array([sum(1 for r in g if r.get("correct") and (p == 0 or (timed_speedup(r) or 0) > p))
                         for g in groups], dtype=float)
        out["fast_p"][f"{p:g}"] = interval(hits[draws].sum(axis=1) / n)
    logs = [[math.log(s) for s in map(timed_speedup, g) if s is not None] for g in groups]
    if any(logs):
        total = np.array([sum(x) for x in logs])[draws].sum(axis=1)
        count = np.array([len(x) for x in logs], dtype=float)[draws].sum(axis=1)
        drawn = count > 0  # a resample that drew no timed problem has no geomean
        out["geomean_speedup"] = interval(np.exp(total[drawn] / count[drawn]))
    return out


def summarize_group(records: list[dict]) -> dict:
    n = len(records)
    statuses = Counter(r.get("status", "") for r in records)
    correct = sum(1 for r in records if r.get("correct"))
    timed = sum(1 for r in records if timed_speedup(r) is not None)

    def rate(count: int) -> float | None:
        return count / n if n else None

    return {
        "n_samples": n,
        "n_problems": len({r["problem_key"] for r in records}),
        "compiled_rate": rate(sum(1 for r in records if r.get("compiled"))),
        "correct_rate": rate(correct),
        "rejected_rate": rate(statuses.get("rejected", 0)),
        "status_counts": {s: statuses.get(s, 0) for s in STATUSES},
        "n_correct_timed": timed,
        "n_correct_untimed": correct - timed,
        "fast_p": {f"{p:g}": fast_p(records, p) for p in FAST_P_THRESHOLDS},
        "pass_at_k": {str(k): mean_pass_at_k(records, k) for k in PASS_AT_K},
        "geomean_speedup": geomean_speedup(records),
        "intervals": {
            "compiled_rate": wilson(sum(1 for r in records if r.get("compiled")), n),
            "correct_rate": wilson(correct, n),
            "rejected_rate": wilson(statuses.get("rejected", 0), n),
            "status": {s: wilson(statuses.get(s, 0), n) for s in STATUSES},
            **problem_bootstrap(records),
        },
    }


def summarize(records: list[dict]) -> dict:
    """{"levels": {"1": {...}, ...}, "all": {...}}: the same summary per level and over everything."""
    by_level: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        by_level[int(r.get("level", 0))].append(r)
    return {
        "levels": {str(level): summarize_group(rs) for level, rs in sorted(by_level.items())},
        "all": summarize_group(records),
    }


def paired_bootstrap(before: list[float], after: list[float], *, resamples: int = 10_000, seed: int = 0,
                     level: float = 0.95) -> dict:
    """The mean of after - before over paired units (problems) and its percentile bootstrap interval,
    resampling units with replacement: the two measurements of one problem move together, so the
    interval is far narrower than two independent intervals would suggest."""
    import random

    if len(before) != len(after) or not before:
        raise ValueError(f"paired_bootstrap needs two equally long, non-empty lists, got {len(before)} and {len(after)}")
    diffs = [a - b for a, b in zip(after, before)]
    n, rng = len(diffs), random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    return {"diff": sum(diffs) / n, "lo": means[int(tail * resamples)],
            "hi": means[min(resamples - 1, int((1 - tail) * resamples))], "n": n}
