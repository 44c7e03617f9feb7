"""Throughput machinery, never verdicts: one device shared by several Evaluators (gate.py, sizing.py),
caches of compiled kernels and launchers (kernel_cache.py, launchers.py, background.py), Triton compiles
outside the device gate (compile_aside.py), timing rounds (rounds.py), batch order (schedule.py) and time
breakdowns (parts.py).
"""
