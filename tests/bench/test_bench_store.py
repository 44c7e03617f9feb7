"""The results log survives kills: torn last lines, duplicates and resumes."""

import json
import signal
import subprocess
import sys
import time

import pytest

from kbencheval.bench.store import ResultsLog, RunError, read_results


def record(problem, sample, status="correct"):
    return {"problem_key": problem, "sample": sample, "level": 1, "status": status}


def test_torn_last_line_is_ignored_then_cut_before_appending(tmp_path):
    path = tmp_path / "results.jsonl"
    with ResultsLog(path) as log:
        assert log.append(record("A", 0))
        assert log.append(record("A", 1))
    with open(path, "ab") as f:  # a writer killed mid-line
        f.write(b'{"problem_key": "B", "sam')
    records, bad = read_results(path)
    assert set(records) == {("A", 0), ("A", 1)} and bad == 1
    with ResultsLog(path) as log:
        assert set(log.done) == {("A", 0), ("A", 1)}
        assert log.append(record("B", 0))
    lines = path.read_text().splitlines()
    assert [json.loads(line)["problem_key"] for line in lines] == ["A", "A", "B"]  # every line parses


def test_duplicate_keys_are_never_written_or_counted(tmp_path):
    path = tmp_path / "results.jsonl"
    with ResultsLog(path) as log:
        assert log.append(record("A", 0, "correct"))
        assert not log.append(record("A", 0, "incorrect"))
    with ResultsLog(path) as log:
        assert not log.append(record("A", 0, "timeout"))
    assert len(path.read_text().splitlines()) == 1
    with open(path, "a") as f:  # a hand-made duplicate: the first line wins
        f.write(json.dumps(record("A", 0, "incorrect")) + "\n")
    records, _ = read_results(path)
    assert len(records) == 1 and records[("A", 0)]["status"] == "correct"


def test_second_writer_on_the_same_log_is_refused(tmp_path):
    path = tmp_path / "results.jsonl"
    with ResultsLog(path):
        with pytest.raises(RunError, match="another `kbench eval`"):
            ResultsLog(path).open()


_WRITER = """
import sys, time
from kbencheval.bench.store import ResultsLog
with ResultsLog(sys.argv[1]) as log:
    for i in range(100000):
        log.append({"problem_key": f"P{i % 7}", "sample": i // 7, "level": 1, "status": "correct", "pad": "x" * 3000})
"""


def test_sigkill_during_appends_then_resume_keeps_one_record_per_key(tmp_path):
    path = tmp_path / "results.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)])
    deadline = time.time() + 30
    while time.time() < deadline and (not path.exists() or path.stat().st_size < 50_000):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before, _ = read_results(path)
    assert len(before) >= 10
    with ResultsLog(path) as log:  # resume: redo everything, only missing keys get written
        written = sum(log.append(record(f"P{i % 7}", i // 7)) for i in range(len(before) + 20))
    assert written == 20
    keys = [(r["problem_key"], r["sample"]) for r in map(json.loads, path.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == len(before) + 20
