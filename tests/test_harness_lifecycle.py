"""A harness that is killed outright (an eval actor hit by ray.kill, a SIGKILLed kbench eval) leaves
neither its fork server nor its judge behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.support import ENV

HARNESS = """
from kbencheval.dataset import load_bundled
from kbencheval.eval.harness import Evaluator, EvalConfig
problem = load_bundled(1)[0]
ev = Evaluator(EvalConfig(device="cpu", sandbox="none", trials=1))
assert ev.evaluate(problem, "```python\\n" + problem.solution_source + "```").correct
print(ev._server.proc.pid, ev._judge_pid, flush=True)
import time; time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_killed_harness_leaves_no_server_or_judge():
    proc = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True, env=ENV)
    server_pid, judge_pid = map(int, proc.stdout.readline().split())
    assert _alive(server_pid) and _alive(judge_pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 5
    while (_alive(server_pid) or _alive(judge_pid)) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(server_pid) and not _alive(judge_pid)
