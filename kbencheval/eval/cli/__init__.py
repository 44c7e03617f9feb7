"""Command-line entry points of the evaluator: `kbench check` (check.py), `kbench serve-eval` (serve.py)
and the Unix-socket service they share (service.py)."""
