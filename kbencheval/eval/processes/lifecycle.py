"""The harness's hold on a candidate's worker process: killed with all it started, awaited, its host memory capped."""

from __future__ import annotations

import os
import signal
import threading
import time


def kill_group(pid: int):
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(pid: int, timeout: float = 3.0):
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.01)


class MemoryWatchdog:
    """Kills a GPU worker whose resident host memory passes the cap (RLIMIT_AS would break CUDA)."""

    def __init__(self, pid: int, limit_gb: float):
        self.pid, self.limit_kb, self.tripped = pid, limit_gb * 2**20, False
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop.wait(0.2):
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
            except (OSError, StopIteration):
                return
            if rss > self.limit_kb:
                self.tripped = True
                kill_group(self.pid)
                return

    def stop(self):
        self._stop.set()
