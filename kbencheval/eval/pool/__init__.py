"""One pool of Evaluators for every caller: `kbench eval`, `kbench synth --verify`, the corpus
verifier and smart's reward pool.

    with EvaluatorPool(EvalConfig(device="cpu"), ["cpu", "cpu"]) as pool:
        results = pool.evaluate([(problem, llm_text), ...])        # EvalResults, in job order

The pool decides what runs where and when (the problems slowest so far first, one verdict for the same
code on the same problem, a deadline per candidate, a replacement for a host that stops answering);
where a host lives is its placement's business: threads in this process (`local`) or Ray actors
that Ray places on any node of its cluster (`ray`). Verdicts are the Evaluator's alone.
"""

from kbencheval.eval.pool.core import EvaluatorPool, PoolError

__all__ = ["EvaluatorPool", "PoolError"]
