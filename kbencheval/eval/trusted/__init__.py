"""The trusted side: what decides a verdict, never running candidate code.

harness.py (the Evaluator: one call, one EvalResult), session.py (one candidate's exchange: ask the
worker, relay to the judge, decide), judge.py + judge_kernels.py (the judge process: reference outputs,
comparison, reference timing), screen.py (verdicts known without running anything).
"""
