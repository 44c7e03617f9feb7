"""Run folders on disk. Every write is atomic, so a run killed at any moment resumes cleanly.

    runs/<name>/manifest.json                               what was generated, with which model and prompt
    runs/<name>/generations/<problem_key>/sample_<k>.json   one `Generation` per (problem, sample)
    runs/<name>/results.jsonl                               one line per (problem, sample): EvalResult + keys
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
GENERATIONS = "generations"
RESULTS = "results.jsonl"
_SAMPLE_RE = re.compile(r"^sample_(\d+)\.json$")


class RunError(ValueError):
    """A run folder that cannot be used as asked; the message says what to do."""


def run_dir(runs_dir: str | Path, run_name: str) -> Path:
    if not run_name or "/" in run_name or run_name in (".", ".."):
        raise RunError(f"run_name={run_name!r} is not a folder name: pass run_name=NAME (letters, digits, - and _)")
    return Path(runs_dir) / run_name


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers see all of it or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunError(f"{path} does not exist; run `kbench generate` for this run first") from None
    except json.JSONDecodeError as e:
        raise RunError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}); delete it and rerun to redo it") from None


@dataclasses.dataclass
class Generation:
    """One LLM sample for one problem, exactly as the model returned it."""

    problem_key: str
    level: int
    problem_id: int
    sample: int
    messages: list[dict]  # the prompt sent
    text: str = ""  # raw response, thinking blocks included
    error: str = ""  # non-empty when the request failed; evaluation then gives format_error
    model: str = ""
    created: str = ""
    extra: dict = dataclasses.field(default_factory=dict)  # client metadata (finish reason, token counts)

    @classmethod
    def from_dict(cls, d: dict) -> "Generation":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def generation_path(run: Path, problem_key: str, sample: int) -> Path:
    return run / GENERATIONS / problem_key / f"sample_{sample}.json"


def list_generations(run: Path) -> list[tuple[str, int, Path]]:
    """(problem_key, sample, path) for every finished generation file, sorted."""
    found = []
    root = run / GENERATIONS
    if not root.is_dir():
        return found
    for problem_dir in root.iterdir():
        if not problem_dir.is_dir():
            continue
        for path in problem_dir.iterdir():
            m = _SAMPLE_RE.match(path.name)
            if m:
                found.append((problem_dir.name, int(m.group(1)), path))
    return sorted(found)


def result_key(record: dict) -> tuple[str, int]:
    return (record["problem_key"], int(record["sample"]))


def read_results(path: Path) -> tuple[dict[tuple[str, int], dict], int]:
    """Records by (problem_key, sample), and how many lines were unreadable.

    A kill can leave a torn last line (no newline); it is ignored. If a key appears twice (e.g. from
    a file edited by hand) the first line wins, so a result is never counted twice.
    """
    records: dict[tuple[str, int], dict] = {}
    bad = 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return records, 0
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # torn tail: the writer died before its newline
        bad += 1
    for line in lines:
        try:
            record = json.loads(line)
            key = result_key(record)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
            bad += 1
            continue
        records.setdefault(key, record)
    return records, bad


class ResultsLog:
    """Append-only results.jsonl, held by one `kbench eval` at a time.

    Each record is one `os.write` of the whole line on an O_APPEND descriptor, then fsync: after a
    kill the file holds whole lines plus at most one torn tail, which `open()` cuts off before
    appending. An exclusive flock stops a second eval on the same run from duplicating work.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.done: dict[tuple[str, int], dict] = {}
        self.unreadable_lines = 0
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._mutex = threading.Lock()

    def open(self) -> "ResultsLog":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise RunError(f"another `kbench eval` is writing {self.path}; wait for it or stop it first") from None
        self._cut_torn_tail()
        self.done, self.unreadable_lines = read_results(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def _cut_torn_tail(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
                f.flush()
                os.fsync(f.fileno())

    def append(self, record: dict) -> bool:
        """Write one record; returns False (writes nothing) if its key is already in the log."""
        key = result_key(record)
        line = (json.dumps(record) + "\n").encode()
        with self._mutex:
            if self._fd is None:
                raise RunError("ResultsLog.append before open(); use `with ResultsLog(path) as log:`")
            if key in self.done:
                return False
            written = os.write(self._fd, line)
            if written != len(line):  # only on a full disk; the next open() cuts the torn line
                raise OSError(f"short write to {self.path} ({written} of {len(line)} bytes); is the disk full?")
            os.fsync(self._fd)
            self.done[key] = record
            return True

    def close(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd is not None:
                os.close(fd)  # closing releases the flock
        self._fd = self._lock_fd = None

    def __enter__(self) -> "ResultsLog":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
