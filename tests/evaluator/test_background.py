"""The harness's optional background work (kbencheval/eval/sharing/background.py): in order, errors carried
to the caller, and never holding the process's exit."""

import os
import subprocess
import sys
import time

import pytest

from kbencheval.eval.sharing.background import SerialBackground


def test_calls_run_in_order_and_errors_reach_the_caller():
    background, ran = SerialBackground("test"), []
    futures = [background.submit(ran.append, i) for i in range(5)]
    failed = background.submit(lambda: 1 / 0)
    background.drain(timeout_s=10)
    assert ran == [0, 1, 2, 3, 4] and all(f.result() is None for f in futures)
    with pytest.raises(ZeroDivisionError):
        failed.result()


def test_queued_work_does_not_hold_the_exit():
    probe = ("import time\nfrom kbencheval.eval.sharing.background import SerialBackground\n"
             "b = SerialBackground('test')\nfor _ in range(3):\n    b.submit(time.sleep, 30)\n")
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
    assert time.monotonic() - t < 20  # 90 s of queued work dropped


def test_the_process_folder_goes_with_its_process():
    probe = "from kbencheval.eval.sharing.background import process_folder\nprint(process_folder('kbench-test-'))\n"
    folder = subprocess.run([sys.executable, "-c", probe], check=True, timeout=60, capture_output=True,
                            text=True).stdout.strip()
    assert folder.startswith("/var/tmp/kbench-test-")
    assert not os.path.exists(folder)
