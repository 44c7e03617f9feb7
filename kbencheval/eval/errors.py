"""Turning a candidate's exception into one readable line (worker and judge both report errors)."""

from __future__ import annotations

import traceback


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
    return f"{type(exc).__name__}: {first[:400]}{where}"


def is_compile_error(exc: BaseException) -> bool:
    return type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct")
