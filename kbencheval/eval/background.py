"""One daemon thread that runs queued calls in order, for the harness's optional work (launchers.py,
kernel_cache.py). A ThreadPoolExecutor's thread would run everything still queued before the process
could exit (dozens of kernel compiles after a `kbench eval`); a daemon thread is simply dropped."""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading


class SerialBackground:
    def __init__(self, name: str):
        self._calls: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn, *args) -> cf.Future:
        future: cf.Future = cf.Future()
        self._calls.put((future, fn, args))
        return future

    def drain(self, timeout_s: float) -> None:
        """Returns once every call queued so far has run."""
        self.submit(lambda: None).result(timeout=timeout_s)

    def _run(self) -> None:
        while True:
            future, fn, args = self._calls.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:  # noqa: BLE001 - the caller's future carries it
                    future.set_exception(e)
