"""Where a request's time goes, by named part: what the benchmarks' breakdowns read.

No verdict reads these figures. Parts are wall-clock spans between marks, without syncs of their own,
so a part that waits for the device (a `.tolist()`, a sync) carries the device work queued before it.
"""

from __future__ import annotations

import time


class Parts:
    """Seconds per part, added up across marks of the same name (`mark` ends the current part)."""

    def __init__(self, seconds: dict | None = None):
        self.seconds = seconds if seconds is not None else {}
        self.last = time.perf_counter()

    def mark(self, part: str) -> None:
        now = time.perf_counter()
        self.seconds[part] = round(self.seconds.get(part, 0.0) + now - self.last, 6)
        self.last = now


def add_parts(total: dict, parts: dict) -> None:
    """Adds a reply's `parts` into `total` (both: part name -> seconds); ignores what is not a number."""
    for part, seconds in parts.items():
        if isinstance(part, str) and isinstance(seconds, (int, float)):
            total[part] = round(total.get(part, 0.0) + seconds, 6)
