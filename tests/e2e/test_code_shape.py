"""Issue #12's size rule, checked: no file over 450 lines (bundled problems exempt), no function over
80 lines.   pytest tests/e2e/test_code_shape.py"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_FILE_LINES, MAX_FUNCTION_LINES = 450, 80


def _python_files() -> list[Path]:
    roots = [REPO / d for d in ("kbencheval", "smart", "scripts", "benchmarks", "tests")]
    files = [p for root in roots if root.exists() for p in root.rglob("*.py")]
    return sorted(p for p in files if "problems" not in p.relative_to(REPO).parts)


def oversized(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        text = path.read_text()
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        if len(text.splitlines()) > MAX_FILE_LINES:
            found.append(f"{rel}: {len(text.splitlines())} lines (max {MAX_FILE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name}(): {length} lines (max {MAX_FUNCTION_LINES})")
    return found


def test_no_file_or_function_over_the_limit():
    assert _python_files(), "found no source files: the checker is looking in the wrong place"
    assert oversized(_python_files()) == []


def test_the_checker_sees_an_oversized_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "probe.py"
    path.write_text(f"def too_long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert [line.split(" ")[1] for line in oversized([path])] == ["too_long():"]
