"""The evaluator, split along its trust line.

Trusted (harness process and the judge): harness.py (Evaluator, sandboxed processes), session.py
(one candidate's conversation), judge.py (reference outputs, comparison), seeds.py, config.py.
Untrusted (the forked worker that imports the candidate): worker.py, tripwires.py, timing.py.
Shared: protocol.py (typed messages, Status) and inputs.py (trial -> tensors). docs/evaluator.md.
"""

from kbencheval.eval.result import EvalResult, Status, TimingStats

__all__ = ["EvalResult", "Status", "TimingStats"]
