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
ev = Evaluator(EvalConfig(device="cpu", sandbox="kernel", trials=1, timeout_s=600))
assert ev.evaluate(problem, "```python\\n" + problem.solution_source + "```").correct
looping = problem.solution_source.replace("        x = x.contiguous()", "        while True:\\n            pass")
threading.Thread(target=ev.evaluate, args=(problem, looping), daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


def _descendants(root: int) -> set[int]:
    """Live processes below `root` (the environment is allowlisted, so no marker reaches them)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.add(pid)
        except OSError:
            pass
    return out


def test_killed_harness_leaves_no_process_behind():
    proc = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(2)  # the looping candidate's worker is running by now
    started = _descendants(proc.pid)
    assert len(started) >= 3  # fork server, judge, looping worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 5
    while _alive(started) and time.time() < deadline:
        time.sleep(0.1)
    assert _alive(started) == set()
