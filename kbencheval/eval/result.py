"""`EvalResult`: the evaluator's verdict, the one shape that leaves kbencheval for everyone else."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any


class Status(str, enum.Enum):
    """Outcome of one evaluation, worst first. `rejected` means the candidate broke the rules."""

    FORMAT_ERROR = "format_error"  # no code block / no ModelNew
    REJECTED = "rejected"  # cheating or forbidden constructs; always the lowest reward
    COMPILE_ERROR = "compile_error"  # import, construction or kernel compilation failed
    RUNTIME_ERROR = "runtime_error"  # crashed while running (incl. segfault, OOM)
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    CORRECT = "correct"


@dataclasses.dataclass
class TimingStats:
    """Per-call runtimes of one model, in microseconds."""

    median_us: float
    mean_us: float
    std_us: float
    p10_us: float
    p90_us: float
    n: int


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
    sandbox: str = ""  # which protections were active
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
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> "EvalResult":
        return cls.from_dict(json.loads(text))
