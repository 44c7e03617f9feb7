"""The order a batch of candidates is handed to several Evaluators: the longest expected first.

A batch ends when its last candidate does. In the order given, the slow ones (an L3 problem whose
kernels compile for seconds, a large matmul) often come last and run alone while the other
Evaluators idle: a noticeable share of the bundled suite's warm pass ran with fewer candidates in
flight than Evaluators. Starting the longest first (the classic LPT rule) leaves the short ones to
fill the gaps at the end. The expectation is what the problem's evaluations took
before in this process (an RL run scores the same problems every epoch); a problem never seen keeps
its place ahead of every known one, so a first batch runs in the order given.
"""

from __future__ import annotations

import threading


class EvalSeconds:
    """Seconds each problem's evaluations took lately (an exponential mean), and the order they suggest."""

    def __init__(self, weight: float = 0.5):
        self.weight = weight  # of the newest evaluation
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, problem: str, seconds: float) -> None:
        with self._lock:
            before = self.seconds.get(problem)
            self.seconds[problem] = seconds if before is None else before + self.weight * (seconds - before)

    def longest_first(self, problems: list[str]) -> list[int]:
        """Indices into `problems`: never-seen problems first in their own order, then the rest by
        expected seconds, longest first (ties keep their order)."""
        with self._lock:
            known = dict(self.seconds)
        unseen = [i for i, p in enumerate(problems) if p not in known]
        seen = sorted((i for i, p in enumerate(problems) if p in known), key=lambda i: -known[problems[i]])
        return unseen + seen
