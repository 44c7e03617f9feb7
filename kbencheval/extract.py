"""Code extraction from LLM text, and the static checks a candidate must pass before it runs.

Static checks are the first of two lines of defence: they reject constructs that have no place in a
kernel (fallbacks, threads, side streams, file and process access, monkeypatching, Tensor
subclasses, reflection). The second line, in the sandboxed worker, watches what `forward` actually
does at run time, so a construct that slips past this AST scan is still caught by its effect.
"""

from __future__ import annotations

import ast
import dataclasses
import re

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Drop reasoning: closed <think>...</think> blocks, a leading block whose <think> was in the prompt
    (text up to an orphan </think>), and an unterminated <think> (everything after it)."""
    text = _THINK_RE.sub("", text)
    if "</think>" in text.lower():  # the opening tag was part of the chat template, not the reply
        text = text[text.lower().rindex("</think>") + len("</think>"):]
    if "<think>" in text.lower():  # generation stopped mid-thought: nothing after the tag is an answer
        text = text[: text.lower().index("<think>")]
    return text.strip()


def extract_code(text: str) -> str | None:
    """The candidate code in an LLM response: the last fenced block that defines ModelNew.

    Falls back to the last python block, then to the whole text if it parses as Python and defines
    ModelNew (some models answer with bare code). None when there is no code at all.
    """
    text = strip_thinking(text or "")
    blocks = [(lang.lower(), body) for lang, body in _FENCE_RE.findall(text)]
    for _, body in reversed(blocks):
        if "class ModelNew" in body:
            return body.strip() + "\n"
    for lang, body in reversed(blocks):
        if lang in ("python", "py", ""):
            return body.strip() + "\n"
    if "class ModelNew" in text:
        try:
            ast.parse(text)
            return text.strip() + "\n"
        except SyntaxError:
            return None
    return None


# Modules a kernel never needs; importing one is how file, process, thread and reflection attacks start.
FORBIDDEN_MODULES = {
    "os", "sys", "subprocess", "multiprocessing", "threading", "concurrent", "asyncio", "ctypes", "cffi",
    "gc", "inspect", "importlib", "builtins", "signal", "socket", "pathlib", "shutil", "io", "tempfile",
    "pickle", "marshal", "dill", "time", "timeit", "numpy", "resource", "mmap", "faulthandler",
    "atexit", "weakref", "code", "codeop", "runpy", "pty", "requests", "urllib", "http",
}
FORBIDDEN_CALLS = {
    "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr", "delattr",
    "__import__", "breakpoint", "input", "exit", "quit", "memoryview",
}
# Attribute names that reach streams, the dispatcher, or torch internals.
FORBIDDEN_ATTRS = {
    "Stream", "stream", "set_stream", "ExternalStream", "_C", "_dynamo", "_python_dispatch", "_ops",
    "__torch_dispatch__", "__torch_function__", "CUDAGraph", "graph", "set_flush_denormal",
    "use_deterministic_algorithms", "set_default_dtype", "manual_seed", "set_rng_state",
    "tolist", "item", "numpy", "cpu",
}
ALLOWED_DUNDERS = {"__init__", "__name__", "__class__", "__call__"}


@dataclasses.dataclass
class StaticReport:
    ok: bool
    reason: str = ""  # the first violation, phrased for the model
    violations: list[str] = dataclasses.field(default_factory=list)
    kernels: list[str] = dataclasses.field(default_factory=list)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _is_triton_jit(decorator: ast.AST) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("jit", "autotune", "heuristics")


def static_check(code: str, backend: str = "triton") -> StaticReport:
    """Scan candidate source; an empty violation list means it may run."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return StaticReport(False, f"syntax error at line {e.lineno}: {e.msg}", [f"syntax: {e.msg}"])
    violations: list[str] = []
    imported_modules: set[str] = set()
    kernels: list[str] = []
    has_model_new = False
    uses_load_inline = False

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    violations.append(f"imports forbidden module '{top}'")
                if name.startswith("torch._") or ".cuda.streams" in name:
                    violations.append(f"imports torch internals '{name}'")
            for alias in node.names:
                imported_modules.add((alias.asname or alias.name).split(".")[0])
                if isinstance(node, ast.ImportFrom) and alias.name in FORBIDDEN_ATTRS:
                    violations.append(f"imports '{alias.name}' (streams and torch internals are not allowed)")
                if alias.name == "load_inline":
                    uses_load_inline = True
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            violations.append(f"try/except at line {node.lineno} (fallback paths are not allowed)")
        elif isinstance(node, ast.ClassDef):
            if node.name == "ModelNew":
                has_model_new = True
            for base in node.bases:
                base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if base_name == "Tensor" or base_name.endswith("Tensor"):
                    violations.append(f"class {node.name} subclasses a Tensor type")
        elif isinstance(node, ast.FunctionDef):
            if any(_is_triton_jit(d) for d in node.decorator_list):
                kernels.append(node.name)
            if node.name in ("__torch_dispatch__", "__torch_function__", "__del__", "__getattr__"):
                violations.append(f"defines {node.name}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else None
            if name in FORBIDDEN_CALLS:
                violations.append(f"calls {name}()")
            if isinstance(func, ast.Attribute) and func.attr == "load_inline":
                uses_load_inline = True
            if name == "load_inline":
                uses_load_inline = True
        elif isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_ATTRS:
                violations.append(f"uses .{node.attr} (streams, RNG, host copies and torch internals are not allowed)")
            elif node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
                violations.append(f"uses dunder attribute .{node.attr}")
            elif node.attr.startswith("_") and _root_name(node) in ("torch", "triton", "tl", "F", "nn"):
                violations.append(f"uses private API .{node.attr}")
        elif isinstance(node, ast.Name) and node.id.startswith("__") and node.id not in ALLOWED_DUNDERS | {"__name__"}:
            violations.append(f"uses {node.id}")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            violations.append("uses global/nonlocal state (caching across calls is not allowed)")

        # Assigning into a module (torch.x = ..., F.relu = ...) is monkeypatching.
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)):
                root = _root_name(target)
                if root in imported_modules:
                    violations.append(f"assigns into module '{root}' (monkeypatching is not allowed)")

    if not has_model_new:
        violations.insert(0, "no class ModelNew")
    if backend == "triton" and not kernels:
        violations.append("no @triton.jit kernel: the triton backend needs custom Triton kernels")
    if backend == "cuda" and not uses_load_inline:
        violations.append("no load_inline call: the cuda backend needs kernels built with load_inline")
    seen, unique = set(), []
    for v in violations:
        if v not in seen:
            seen.add(v)
            unique.append(v)
    return StaticReport(not unique, unique[0] if unique else "", unique, kernels)
