"""What the harness's optional builds for later candidates share (launchers.py, kernel_cache.py): one
daemon thread that runs queued calls in order (a ThreadPoolExecutor's thread would run everything
still queued before the process could exit: dozens of kernel compiles after a `kbench eval`; a daemon
thread is simply dropped), and the per-process folder the workers read their results from."""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import queue
import shutil
import tempfile
import threading


# Set when the process starts to exit: a build still running then fails because its folder or server is going
# away, which is no news (the evaluation is over), so the builders drop it silently instead of printing an error.
EXITING = threading.Event()


def _remove(folder: str) -> None:
    EXITING.set()
    shutil.rmtree(folder, ignore_errors=True)


def process_folder(prefix: str) -> str | None:
    """A fresh folder under /var/tmp (a worker's private /tmp would hide /tmp), removed when this process
    exits; None where there is none to write."""
    try:
        folder = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    except OSError:
        return None
    atexit.register(_remove, folder)
    return folder


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
