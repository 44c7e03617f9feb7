"""The evaluator, laid out as its threat model (docs/architecture.md, docs/evaluator.md):

trusted/    harness (Evaluator), session, judge: where a verdict is decided
untrusted/  worker, tripwires, audit: what runs in the candidate's process
contract/   protocol, inputs, timing ...: what both sides import; imports neither
processes/  fork server, worker launch, sandbox/
sharing/    device gate, kernel and launcher caches, compile aside: throughput, never verdicts
pool/       EvaluatorPool: many Evaluators, here or as Ray actors, for every caller that judges in bulk
cli/        `kbench check`, `kbench serve-eval`

The front door: `from kbencheval.eval import Evaluator, EvaluatorPool, EvalConfig, EvalResult, Status`.
Evaluator, EvaluatorPool and EvalConfig load on first use, so a candidate's worker (which imports this package) never imports the
trusted side.
"""

from kbencheval.eval.result import EvalResult, Status, TimingStats

__all__ = ["EvalConfig", "EvalResult", "Evaluator", "EvaluatorPool", "HarnessError", "Status", "TimingStats"]


def __getattr__(name: str):
    if name == "EvalConfig":
        from kbencheval.eval.config import EvalConfig

        return EvalConfig
    if name in ("Evaluator", "HarnessError"):
        from kbencheval.eval.trusted import harness

        return getattr(harness, name)
    if name == "EvaluatorPool":
        from kbencheval.eval.pool import EvaluatorPool

        return EvaluatorPool
    raise AttributeError(f"module 'kbencheval.eval' has no attribute {name!r}")
