"""A harness that is killed outright (an eval actor hit by ray.kill, a SIGKILLed kbench eval) leaves
nothing behind: not its fork server, not its judge, not a candidate that is busy looping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support import ENV

HARNESS = """
import threading, time
from kbencheval.dataset import load_bundled
from kbencheval.eval.harness import Evaluator, EvalConfig
problem = load_bundled(1)[0]
ev = Evaluator(EvalConfig(device="cpu", sandbox="none", trials=1, timeout_s=600))
assert ev.evaluate(problem, "```python\\n" + problem.solution_source + "```").correct
looping = problem.solution_source.replace("        x = x.contiguous()", "        while True:\\n            pass")
threading.Thread(target=ev.evaluate, args=(problem, looping), daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


def _tagged(marker: str) -> list[int]:
    """Live processes whose environment carries the marker (the harness and all it started)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                tagged = marker.encode() in f.read()
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if tagged and not zombie:
            pids.append(int(entry))
    return pids


def test_killed_harness_leaves_no_process_behind():
    marker = f"TF_LIFECYCLE_TEST={os.getpid()}_{time.time_ns()}"
    key, value = marker.split("=")
    proc = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True,
                            env={**ENV, key: value})
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(2)  # the looping candidate's worker is running by now
    assert len(_tagged(marker)) >= 4  # harness, fork server, judge, looping worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 5
    while _tagged(marker) and time.time() < deadline:
        time.sleep(0.1)
    assert _tagged(marker) == []
