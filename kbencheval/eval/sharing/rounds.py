"""How trusted timing is split into rounds, when it may stop, and how many timed outputs are judged.

Timed iterations are split into rounds that alternate between the judge and the worker: at most
MAX_ROUNDS (each costs messages and judged outputs), of at least MIN_ROUND iterations. After each round
the harness picks iterations whose outputs the judge checks (session.Session.trusted_timing).
"""

from __future__ import annotations

import statistics

MAX_ROUNDS, MIN_ROUND = 20, 5
JUDGED_TIMED_OUTPUTS = 8
# Picked outputs recomputed and judged in one request while they fit this: each request is a few waits
# for a time-sliced device (tens of milliseconds where Evaluators share it), whatever its outputs weigh.
TIMED_BATCH_BYTES = 256 << 20


def round_sizes(iters: int) -> list[int]:
    """100 iterations -> 20 rounds of 5; 7 -> 5 + 2; 1000 -> 20 of 50 (the bound needs several rounds)."""
    size = max(MIN_ROUND, -(-iters // MAX_ROUNDS))
    return [min(size, iters - start) for start in range(0, iters, size)]


def picks_per_round(spec) -> int:
    """Timed outputs judged per round: at least JUDGED_TIMED_OUTPUTS in all, even when timing stops as
    early as it may (`min_iters`, and never before four rounds): one per round at 40 iterations, two at 20."""
    sizes = round_sizes(spec.iters)
    stop = min(spec.min_iters, spec.iters) if spec.target_rse else spec.iters
    fewest = min(len(sizes), max(4, -(-stop // sizes[0])))
    return -(-JUDGED_TIMED_OUTPUTS // fewest)


def timed_outputs_per_request(output_bytes: int) -> int:
    """Picked outputs per `timed_outputs` request: as many as fit TIMED_BATCH_BYTES, at most
    JUDGED_TIMED_OUTPUTS (one request is one hold of the device, which a waiting timer waits for), at
    least one. The worker holds all but the last as copies until the judge has read them
    (sizing.device_bytes_needed counts them)."""
    return max(1, min(JUDGED_TIMED_OUTPUTS, TIMED_BATCH_BYTES // max(output_bytes, 1)))


def precise_enough(times: dict, rounds: list, spec) -> bool:
    """Stop timing before the next round? Only after `spec.min_iters` iterations and an even number of
    rounds (each order, reference first and candidate first, equally often), once the per-round
    speedups (median of the round's paired ratios) put the speedup's relative standard error within
    `spec.target_rse`. A noisy kernel gets up to `spec.iters`; a steady one stops early.

    The spread is robust (1.4826 x the median absolute deviation, the standard deviation of normal
    data), as the speedup itself is a median: one outlying round moves neither, so it does not keep an
    otherwise steady candidate timing to `spec.iters`."""
    done = len(times["new_us"])
    if not spec.target_rse or done < min(spec.min_iters, spec.iters) or len(rounds) % 2 or len(rounds) < 4:
        return False
    per_round, start = [], 0
    for r in rounds:
        pairs = zip(times["ref_us"][start:start + r["iters"]], times["new_us"][start:start + r["iters"]])
        per_round.append(statistics.median(ref / new for ref, new in pairs))
        start += r["iters"]
    center = statistics.median(per_round)
    spread = 1.4826 * statistics.median(abs(x - center) for x in per_round)
    rse = spread / (len(per_round) ** 0.5 * center)
    return rse <= spec.target_rse
