"""A progress bar with rate and ETA for jobs that run longer than a few seconds, drawn only on a terminal.

    with progress_bar(len(jobs), "verify") as advance:
        for job in jobs:
            run(job)
            advance()

Off a terminal (CI, `> log`, a Ray actor) it draws nothing: a redirected bar is a wall of control
codes, and those jobs print their own summary lines. Thread-safe: advance() may be called from workers.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable, Iterator


def on_terminal() -> bool:
    return sys.stderr.isatty() and sys.stdout.isatty()


@contextlib.contextmanager
def progress_bar(total: int | None, description: str, unit: str = "", *, completed: int = 0,
                 console=None) -> Iterator[Callable[[float], None]]:
    """Yields advance(n=1). A bar (on stderr, or on `console`, which then prints above it): done/total,
    rate (per second, or per minute when slow), elapsed and ETA; a no-op off a terminal. total=None
    draws a count without an ETA; completed: work done before (a resumed run), left out of the rate."""
    if not on_terminal():
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        """Completed per second since the start (rich's windowed speed hides a slow warm-up)."""

        def render(self, task) -> Text:
            elapsed = task.finished_time if task.finished else task.elapsed
            if not elapsed or not task.completed:
                return Text(f"-{unit}/s", style="progress.data.speed")
            rate = task.completed / elapsed
            text = f"{rate:.2f}{unit}/s" if rate >= 0.1 else f"{60 * rate:.1f}{unit}/min"
            return Text(text, style="progress.data.speed")

    lock = threading.Lock()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                  console=console or Console(stderr=True), transient=False) as bar:
        task = bar.add_task(description, total=None if total is None else total - completed)

        def advance(n: float = 1) -> None:
            with lock:
                bar.advance(task, n)

        yield advance
