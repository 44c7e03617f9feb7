"""The evaluator's trust line, checked on the source: nothing the candidate's process runs (untrusted/)
imports the trusted side, and the contract and the sharing machinery import neither side.

Static: every import of every module (function-level ones too) is followed through kbencheval, and a
module's parent packages count with what their __init__ imports when loaded.   pytest tests/evaluator/test_eval_rooms.py
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EVAL = "kbencheval.eval"
RULES = {  # room -> rooms it must not reach
    "untrusted": ("trusted",),
    "contract": ("trusted", "untrusted"),
    "sharing": ("trusted", "untrusted"),
}


def _modules(root: Path, top: str) -> dict[str, Path]:
    found = {}
    for path in (root / top).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        if "problems" in parts:
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path], top_level_only: bool) -> set[str]:
    """kbencheval modules `name` imports: anywhere in it, or (a parent package) only when it is loaded."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = []
    todo = list(tree.body)
    while todo:  # statements run on import; function and class bodies only when not top_level_only
        node = todo.pop()
        nodes.append(node)
        if top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules}


def _parents(name: str, modules: dict) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))} & modules.keys()


def violations(root: Path, top: str = "kbencheval", eval_pkg: str = EVAL) -> list[str]:
    """Each path from a module of a room in RULES to a room it must not reach. A module imported by name
    counts with every import in it; a parent package loaded on the way, with its top-level imports only."""
    modules = _modules(root, top)
    full = {name: _imports(name, path, modules, top_level_only=False) for name, path in modules.items()}
    loaded = {name: _imports(name, path, modules, top_level_only=True) for name, path in modules.items()}
    found = set()
    for room, banned in RULES.items():
        prefix = f"{eval_pkg}.{room}"
        bad = tuple(f"{eval_pkg}.{b}" for b in banned)
        for start in sorted(m for m in modules if m == prefix or m.startswith(prefix + ".")):
            came_from = {(start, "full"): None}
            came_from.update({(p, "load"): (start, "full") for p in _parents(start, modules)})
            queue = deque(came_from)
            while queue:
                state = queue.popleft()
                name, mode = state
                for target in (full if mode == "full" else loaded)[name]:
                    for nxt in [(target, "full")] + [(p, "load") for p in _parents(target, modules)]:
                        if nxt in came_from:
                            continue
                        came_from[nxt] = state
                        if nxt[0] in bad or nxt[0].startswith(tuple(b + "." for b in bad)):
                            if nxt[1] == "load":  # reported with the module below it that was imported
                                continue
                            chain, step = [], nxt
                            while step is not None:
                                chain.append(step[0])
                                step = came_from[step]
                            found.add(f"{room}/ reaches {nxt[0]}: {' -> '.join(reversed(chain))}")
                            continue
                        queue.append(nxt)
    return sorted(found)


def test_no_room_imports_across_the_trust_line():
    assert (REPO / "kbencheval" / "eval" / "untrusted" / "worker.py").exists(), "the rooms moved: update RULES"
    assert violations(REPO) == []


def test_the_checker_sees_an_import_across_the_line(tmp_path):
    pkg = tmp_path / "kb" / "eval"
    for room in ("trusted", "untrusted", "contract"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (tmp_path / "kb" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("def __getattr__(name):\n    from kb.eval.trusted import judge\n")
    (pkg / "trusted" / "judge.py").write_text("")
    (pkg / "contract" / "inputs.py").write_text("import os\n")
    (pkg / "untrusted" / "worker.py").write_text("from kb.eval.contract import inputs\n")
    assert violations(tmp_path, "kb", "kb.eval") == []  # the package's lazy front door is not a load-time import
    (pkg / "contract" / "inputs.py").write_text("def later():\n    from kb.eval.trusted.judge import run\n")
    assert violations(tmp_path, "kb", "kb.eval") == [
        "contract/ reaches kb.eval.trusted.judge: kb.eval.contract.inputs -> kb.eval.trusted.judge",
        "untrusted/ reaches kb.eval.trusted.judge: kb.eval.untrusted.worker -> kb.eval.contract.inputs -> "
        "kb.eval.trusted.judge"]
