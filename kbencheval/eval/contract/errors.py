"""Turning a candidate's exception into one readable line (worker and judge both report errors)."""

from __future__ import annotations

import re
import traceback


FEEDBACK_CHARS = 1000  # error and feedback text, as long as a person needs to fix a kernel


def clip(text: str, limit: int = FEEDBACK_CHARS) -> str:
    """`text` cut to `limit` characters: what crosses from a candidate is bounded before it is shown."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def read_tail(path, limit: int = 1 << 16) -> str:
    """The last `limit` bytes of a log a candidate could have written: opened without following a
    symlink, not waiting on a FIFO, only a plain file with one name (not a hard link elsewhere)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return ""
        os.lseek(fd, max(0, info.st_size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode(errors="replace")
    finally:
        os.close(fd)


def short_error(exc: BaseException, candidate_file: str | None = None) -> str:
    """One readable line (plus the candidate's own frame), without harness traceback noise."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if candidate_file and frame.filename == candidate_file:
            where = f" (candidate line {frame.lineno}: {(frame.line or '').strip()[:120]})"
            break
    msg = str(exc).strip().splitlines()
    first = next((line for line in msg if line.strip()), "")
    # Triton compilation errors put the useful line last.
    if type(exc).__name__ in ("CompilationError", "InterpreterError") and msg:
        first = " ".join(line.strip() for line in msg[-3:] if line.strip())
    return f"{type(exc).__name__[:80]}: {first[:400]}{where}"


def is_compile_error(exc: BaseException) -> bool:
    return type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct")


def tail(path, n: int = 3) -> str:
    """The last `n` non-empty lines of a log, joined on one line."""
    lines = [line.strip() for line in read_tail(path).splitlines() if line.strip()]
    return " | ".join(lines[-n:])[-400:]


def last_exception_line(path) -> str:
    """The last 'SomeError: message' line of a log (a traceback's final line), or ''."""
    lines = read_tail(path).splitlines()
    return next((line.strip()[:300] for line in reversed(lines)
                 if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*:", line.strip())), "")
