"""kbencheval.progress: rate and ETA on a terminal, nothing off one (smart's step bar included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from kbencheval.progress import progress_bar
from tests.support import ENV


def _on_a_terminal(code: str) -> str:
    """Run code with stdout and stderr on a pseudo-terminal; returns what it drew."""
    leader, follower = os.openpty()
    env = {**ENV, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower closed: the child is done
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))  # colours and cursor moves


def test_bar_shows_rate_and_eta_on_a_terminal():
    drawn = _on_a_terminal("""
        import time
        from kbencheval.progress import progress_bar
        with progress_bar(3, "verify variants") as advance:
            for _ in range(3):
                time.sleep(0.05)
                advance()
    """)
    assert "verify variants" in drawn and "3/3" in drawn and "eta" in drawn and "/s" in drawn


def test_quiet_off_a_terminal(capsys):
    with progress_bar(3, "verify variants") as advance:
        for _ in range(3):
            advance()
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_training_steps_bar(tmp_path):
    """smart's Tracker draws the step bar (steps/s and ETA) under its step lines; a resumed run starts at its step."""
    drawn = _on_a_terminal(f"""
        from pathlib import Path
        from smart.tracking import Tracker
        t = Tracker(Path({str(tmp_path)!r}), 5, "sft", every_step=True, start_step=2)
        for step in range(2, 5):
            t.log(step, {{"train/loss": 1.0}})
        t.close()
    """)
    assert "sft steps" in drawn and "3/3" in drawn and "steps/s" in drawn and "sft step 5/5" in drawn
