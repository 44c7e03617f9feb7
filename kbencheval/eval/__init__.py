"""The harness: static checks, sandboxed workers, correctness, timing and anti-hacking checks."""

from kbencheval.eval.result import EvalResult, Status, TimingStats

__all__ = ["EvalResult", "Status", "TimingStats"]
