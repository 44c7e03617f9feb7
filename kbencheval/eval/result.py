"""`EvalResult`: the evaluator's verdict, the one shape that leaves kbencheval for everyone else."""

from __future__ import annotations

import dataclasses
import json
import statistics
from typing import Any

from kbencheval.eval.contract.protocol import Status

__all__ = ["EvalResult", "Status", "TimingStats", "feedback_text"]


@dataclasses.dataclass
class TimingStats:
    """Per-call runtimes of one model, in microseconds."""

    median_us: float
    mean_us: float
    std_us: float
    p10_us: float
    p90_us: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> "TimingStats":
        v = sorted(values)
        q = lambda p: v[min(len(v) - 1, int(round(p * (len(v) - 1))))]  # noqa: E731
        return cls(median_us=round(statistics.median(v), 3), mean_us=round(statistics.fmean(v), 3),
                   std_us=round(statistics.pstdev(v), 3), p10_us=round(q(0.1), 3), p90_us=round(q(0.9), 3), n=len(v))


@dataclasses.dataclass
class EvalResult:
    status: Status
    problem: str = ""
    compiled: bool = False
    correct: bool = False
    speedup: float | None = None  # ref median / candidate median; None unless timed on a GPU
    runtime_us: float | None = None
    ref_runtime_us: float | None = None
    runtime_stats: TimingStats | None = None
    ref_runtime_stats: TimingStats | None = None
    timing_meaningful: bool = False  # False under the CPU interpreter
    error: str = ""  # short, cleaned of traceback noise
    feedback: str = ""  # text fit to show the model in the next turn
    checks: dict[str, Any] = dataclasses.field(default_factory=dict)  # check name -> finding
    device: str = ""
    sandbox: list[str] = dataclasses.field(default_factory=list)  # active protection layers; "missing X: why"
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    eval_seconds: float = 0.0

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalResult":
        d = dict(d)
        d["status"] = Status(d["status"])
        for key in ("runtime_stats", "ref_runtime_stats"):
            if d.get(key) is not None:
                d[key] = TimingStats(**d[key])
        if isinstance(d.get("sandbox"), str):  # results saved before the sandbox listed layers
            d["sandbox"] = [p for p in d["sandbox"].split("; ") if p]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> "EvalResult":
        return cls.from_dict(json.loads(text))


def feedback_text(result: EvalResult) -> str:
    """The one writer of the specific finding for the model's next turn (kbencheval.prompts.feedback_message
    frames it as a chat turn)."""
    if result.status == Status.CORRECT:
        if result.speedup is not None:
            return f"correct; {result.speedup:.2f}x the reference's speed"
        return "correct; timing is not available on this device"
    hints = {
        Status.REJECTED: " Compute the output in your own kernels, without torch compute ops or tricks.",
        Status.INCORRECT: " Check indexing, masking and the reduction order against the reference.",
        Status.TIMEOUT: " Look for a hang or an unbounded loop.",
    }
    return f"{result.error}{hints.get(result.status, '')}".strip()
