"""The evaluator, laid out as its threat model (docs/architecture.md, docs/evaluator.md):

trusted/    harness (Evaluator), session, judge: where a verdict is decided
untrusted/  worker, tripwires, audit: what runs in the candidate's process
contract/   protocol, inputs, timing ...: what both sides import; imports neither
processes/  fork server, worker launch, sandbox/
sharing/    device gate, kernel and launcher caches, compile aside: throughput, never verdicts
cli/        `kbench check`, `kbench serve-eval`

The front door: `from kbencheval.eval import Evaluator, EvalConfig, EvalResult, Status`. Evaluator and
EvalConfig load on first use, so a candidate's worker (which imports this package) never imports the
trusted side.
"""

from kbencheval.eval.result import EvalResult, Status, TimingStats

__all__ = ["EvalConfig", "EvalResult", "Evaluator", "HarnessError", "Status", "TimingStats"]


def __getattr__(name: str):
    if name == "EvalConfig":
        from kbencheval.eval.config import EvalConfig

        return EvalConfig
    if name in ("Evaluator", "HarnessError"):
        from kbencheval.eval.trusted import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'kbencheval.eval' has no attribute {name!r}")
