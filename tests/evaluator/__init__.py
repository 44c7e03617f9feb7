"""The evaluator's trusted side: protocol, judge, timing, the harness and its processes, the device gate,
shared caches and launchers, the sandbox's fail-closed minimum, and the GPU-marked evaluator tests."""
