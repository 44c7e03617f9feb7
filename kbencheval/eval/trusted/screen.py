"""The verdicts known without running anything: no code block, no ModelNew, a syntax error, a static
violation. The Evaluator screens every candidate first; `kbench check` does too, before it starts one."""

from __future__ import annotations

from kbencheval.eval.result import EvalResult, Status
from kbencheval.extract import defines_model_new, extract_code, static_check


def screen(text: str, backend: str, *, static_checks: bool = True,
           is_code: bool = False) -> tuple[str | None, dict, EvalResult | None]:
    """What is known without running anything: (code, checks, verdict). `text` is an LLM response, or
    the code itself when `is_code` (a .py file: a syntax error is then reported as one, not as a missing
    code block). `checks` holds the static checks' findings when they ran; `verdict` is set when the
    candidate cannot run (no code, no ModelNew, a syntax error, a static violation)."""
    code = text if is_code else extract_code(text)
    if code is None:
        return None, {}, EvalResult(Status.FORMAT_ERROR, error="no code block found in the response")
    if not defines_model_new(code):
        return code, {}, EvalResult(Status.FORMAT_ERROR, error="the code defines no class ModelNew")
    if not static_checks:
        return code, {}, None
    report = static_check(code, backend)
    checks = {"static": report.violations or "ok"}
    if report.ok:
        return code, checks, None
    status = Status.COMPILE_ERROR if report.reason.startswith("syntax error") else Status.REJECTED
    return code, checks, EvalResult(status, error=report.reason, checks=checks)
