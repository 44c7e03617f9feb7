"""The untrusted side: code that runs in the candidate's own process, which the candidate controls.

worker.py (imports and runs one candidate, times its replays), tripwires.py and audit.py (in-process
run-time checks: early and cheap, never what a verdict rests on). Nothing here imports trusted/
(tests/evaluator/test_eval_rooms.py).
"""
