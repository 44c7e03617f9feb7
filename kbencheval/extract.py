"""Code extraction from LLM text, and the static checks a candidate must pass before it runs.

Static checks are an allowlist and a tripwire: imports only from a short list of modules, no private
or dunder attributes, no frame/code/generator internals, no attribute chain that reaches a module
outside the list, no fallbacks, reflection, streams or monkeypatching. Python has unbounded routes
around any scan, so no verdict rests on this one alone (docs/evaluator.md).
"""

from __future__ import annotations

import ast
import dataclasses
import re
import types

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
    """The candidate code in an LLM response: the whole text if it parses as Python and names ModelNew
    (bare code, e.g. a .py file, whose strings may hold fences), else the last fenced block that defines
    ModelNew, else the last python block. None when there is no code at all.
    """
    text = strip_thinking(text or "")
    if "class ModelNew" in text and _parses(text):  # prose and fences never parse
        return text.strip() + "\n"
    blocks = [(lang.lower(), body) for lang, body in _FENCE_RE.findall(text)]
    for _, body in reversed(blocks):
        if "class ModelNew" in body:
            return body.strip() + "\n"
    for lang, body in reversed(blocks):
        if lang in ("python", "py", ""):
            return body.strip() + "\n"
    return None


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


# Static checks are an allowlist: a candidate imports only these modules, reaches no other module
# through an attribute chain (`torch.cuda.os`), and touches no private or frame/code internals.
ALLOWED_MODULES = {"torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.cuda", "triton", "triton.language",
                   "math"}
ALLOWED_MODULE_PREFIXES = ("triton.language.",)  # tl.math, tl.extra.cuda.libdevice, ...
BACKEND_MODULES = {"triton": set(), "cuda": {"torch.utils.cpp_extension"}}
FORBIDDEN_CALLS = {
    "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr", "delattr", "dir",
    "__import__", "breakpoint", "input", "exit", "quit", "memoryview", "help",
}
# Attribute names that reach streams, RNG, host copies, launch hooks or native libraries.
FORBIDDEN_ATTRS = {
    "Stream", "stream", "set_stream", "ExternalStream", "CUDAGraph", "graph", "set_flush_denormal",
    "use_deterministic_algorithms", "set_default_dtype", "manual_seed", "set_rng_state",
    "tolist", "item", "numpy", "cpu", "add_pre_run_hook", "pre_run_hooks", "load_library", "apply_",
    "map_", "map2_", "register_forward_hook", "register_forward_pre_hook",
}
# Frame, code, generator and traceback internals: the routes from any object to the harness's frames.
INTERNAL_ATTRS = {
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "f_lasti", "tb_frame", "tb_next",
    "co_code", "co_consts", "co_names", "co_filename", "func_globals", "func_code",
}
ALLOWED_DUNDER_ATTRS = {"__init__"}  # super().__init__()
ALLOWED_DUNDER_NAMES = {"__name__"}
ALLOWED_DUNDER_DEFS = {"__init__"}


@dataclasses.dataclass
class StaticReport:
    ok: bool
    reason: str = ""  # the first violation, phrased for the model
    violations: list[str] = dataclasses.field(default_factory=list)


def defines_model_new(code: str) -> bool:
    """The one ModelNew check: a top-level `class ModelNew` (code that does not parse counts when the
    name appears, so that the syntax error is reported by the static check or the import)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "class ModelNew" in code
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def _module_allowed(name: str, allowed: set[str]) -> bool:
    return name in allowed or name.startswith(ALLOWED_MODULE_PREFIXES)


def _is_triton_jit(decorator: ast.AST) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("jit", "autotune", "heuristics")


def _chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """`a.b.c` -> ("a", ["b", "c"]); (None, ...) when the root is not a plain name."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


class _ModuleResolver:
    """Walks attribute chains on the real modules to find a module outside the allowlist on the way.

    Imports only allowlisted modules, never another name taken from the candidate."""

    def __init__(self, allowed: set[str]):
        self.allowed = allowed

    def value(self, module_name: str, attrs: list[str]):
        """The object at module.attrs (public attributes only), or None."""
        import importlib

        try:
            value = importlib.import_module(module_name)
        except ImportError:
            return None
        for attr in attrs:
            if attr.startswith("_"):
                return None
            value = getattr(value, attr, None)
        return value

    def walk(self, module_name: str, attrs: list[str]) -> str | None:
        import importlib
        import types

        try:
            value = importlib.import_module(module_name)
        except ImportError:
            return None
        for k, attr in enumerate(attrs):
            value = getattr(value, attr, None) if not attr.startswith("_") else None
            if isinstance(value, types.ModuleType):
                name = value.__name__
                package_on_the_way = k < len(attrs) - 1 and any(a.startswith(name + ".") for a in self.allowed)
                if not _module_allowed(name, self.allowed) and not package_on_the_way:
                    return name
            elif not isinstance(value, type):
                return None
        return None


def _check_import(node, allowed: set[str], aliases: dict, resolver: _ModuleResolver, violations: list) -> None:
    listed = ", ".join(sorted(allowed))
    if isinstance(node, ast.Import):
        for alias in node.names:
            if not _module_allowed(alias.name, allowed):
                violations.append(f"imports '{alias.name}': only {listed} may be imported")
            elif alias.asname:
                aliases[alias.asname] = alias.name
            else:
                aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        return
    module = node.module or ""
    if module == "__future__":
        return
    if node.level or not _module_allowed(module, allowed):
        violations.append(f"imports from '{'.' * node.level}{module}': only {listed} may be imported")
        return
    for alias in node.names:
        if alias.name == "*" or alias.name.startswith("_"):
            violations.append(f"imports '{alias.name}' from {module}")
            continue
        if (bad := resolver.walk(module, [alias.name])) is not None:
            violations.append(f"imports module '{bad}' (from {module}): only {listed} may be used")
        full = f"{module}.{alias.name}"
        aliases[alias.asname or alias.name] = full if _module_allowed(full, allowed) else None


def static_check(code: str, backend: str = "triton") -> StaticReport:
    """Scan candidate source; an empty violation list means it may run. A tripwire, not a sandbox."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return StaticReport(False, f"syntax error at line {e.lineno}: {e.msg}", [f"syntax: {e.msg}"])
    allowed = ALLOWED_MODULES | BACKEND_MODULES.get(backend, set())
    resolver = _ModuleResolver(allowed)
    violations: list[str] = []
    aliases: dict[str, str | None] = {}  # local name -> the allowed module it is bound to (None: not a module)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _check_import(node, allowed, aliases, resolver, violations)
    # A module may only be the root of an attribute chain (torch.relu), never a value of its own: a module
    # bound to another name (m = torch; m.empty = ...) or passed along would escape the checks below.
    chain_roots = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        _check_node(node, aliases, resolver, violations)
        if isinstance(node, ast.Name) and aliases.get(node.id) and id(node) not in chain_roots and \
                isinstance(resolver.value(aliases[node.id], []), types.ModuleType):
            violations.append(f"uses module '{node.id}' as a value at line {node.lineno} (a module may only be "
                              "named by an import and used as torch.name)")
        elif isinstance(node, ast.Attribute) and id(node) not in chain_roots:
            root, attrs = _chain(node)
            if aliases.get(root) and isinstance(resolver.value(aliases[root], attrs), types.ModuleType):
                violations.append(f"uses module '{root}.{'.'.join(attrs)}' as a value at line {node.lineno} "
                                  "(import it with `import ... as name` instead)")
    kernels = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and any(map(_is_triton_jit, n.decorator_list))]
    uses_load_inline = any(getattr(n, "id", getattr(n, "attr", None)) == "load_inline" for n in ast.walk(tree)
                           if isinstance(n, (ast.Name, ast.Attribute))) or "load_inline" in aliases
    if backend == "triton" and not kernels:
        violations.append("no @triton.jit kernel: the triton backend needs custom Triton kernels")
    if backend == "cuda" and not uses_load_inline:
        violations.append("no load_inline call: the cuda backend needs kernels built with load_inline")
    unique = list(dict.fromkeys(violations))
    return StaticReport(not unique, unique[0] if unique else "", unique)


def _check_node(node, aliases: dict, resolver: _ModuleResolver, violations: list) -> None:
    if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
        violations.append(f"try/except at line {node.lineno} (fallback paths are not allowed)")
    elif isinstance(node, ast.ClassDef):
        for base in node.bases:
            if _tensor_type(base, aliases, resolver):
                violations.append(f"class {node.name} subclasses a Tensor type")
            elif not isinstance(base, (ast.Name, ast.Attribute)):
                violations.append(f"class {node.name} has a computed base class (name it: nn.Module)")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) > 1:
        violations.append("calls type() with a class body (classes are defined with `class`)")
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if node.name.startswith("__") and node.name not in ALLOWED_DUNDER_DEFS:
            violations.append(f"defines {node.name} (only __init__ may be a dunder method)")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
        violations.append(f"calls {node.func.id}()")
    elif isinstance(node, ast.Attribute):
        _check_attribute(node, aliases, resolver, violations)
    elif isinstance(node, ast.Name) and node.id.startswith("__") and node.id not in ALLOWED_DUNDER_NAMES:
        violations.append(f"uses {node.id}")
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        violations.append("uses global/nonlocal state (caching across calls is not allowed)")
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
    for target in targets:  # assigning into a module (torch.x = ..., F.relu = ...) is monkeypatching
        root = target
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if target is not root and isinstance(root, ast.Name) and root.id in aliases:
            violations.append(f"assigns into module '{root.id}' (monkeypatching is not allowed)")


def _tensor_type(base: ast.AST, aliases: dict, resolver: _ModuleResolver) -> bool:
    """A base class that is torch.Tensor or a subclass of it (nn.Parameter, nn.Buffer, ...), by name or by value."""
    import torch

    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    if name == "Tensor" or name.endswith("Tensor") or name in ("Parameter", "Buffer", "UninitializedParameter"):
        return True
    root, attrs = _chain(base) if isinstance(base, ast.Attribute) else (getattr(base, "id", None), [])
    if root and aliases.get(root):
        value = resolver.value(aliases[root], attrs)
        return isinstance(value, type) and issubclass(value, torch.Tensor)
    return False


def _check_attribute(node: ast.Attribute, aliases: dict, resolver: _ModuleResolver, violations: list) -> None:
    attr = node.attr
    if attr.startswith("__") and attr.endswith("__"):
        if attr not in ALLOWED_DUNDER_ATTRS:
            violations.append(f"uses dunder attribute .{attr}")
    elif attr.startswith("_"):
        violations.append(f"uses private attribute .{attr} (names starting with _ are not allowed; name your "
                          "own attributes without the underscore)")
    elif attr in INTERNAL_ATTRS:
        violations.append(f"uses .{attr} (frame, code and generator internals are not allowed)")
    elif attr in FORBIDDEN_ATTRS:
        violations.append(f"uses .{attr} (streams, RNG, host copies, launch hooks and native libraries are "
                          "not allowed)")
    root, attrs = _chain(node)
    module = aliases.get(root) if root else None
    if module and (bad := resolver.walk(module, attrs)) is not None:
        violations.append(f"reaches module '{bad}' through {root}.{'.'.join(attrs)}: only "
                          f"{', '.join(sorted(resolver.allowed))} may be used")
