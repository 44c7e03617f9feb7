"""Inductor-generated Triton code (KernelBook's `triton_code`) -> the same program on public APIs.

KernelBook's kernels are TorchInductor output. Besides `@triton.jit` kernels and plain torch, they
reach torch internals that the evaluator's static allowlist rejects (`torch._inductor...` imports,
`torch._C._dynamo.guards` helpers, `torch.cuda._DeviceGuard`), so unmodified rows would all be
`rejected` and an SFT set verified by our evaluator would be empty. This rewrite replaces each known
helper by a public equivalent and keeps the kernels and the wrapper's logic as they are:

    grid(n)                          -> a plain grid function over the launch's XBLOCK/YBLOCK/ZBLOCK
    empty_strided_cuda(...)          -> torch.empty_strided(..., device=<the run's device>)
    reinterpret_tensor(t, sz, st, o) -> torch.as_strided(t, sz, st, t.storage_offset() + o)
    assert_size_stride, get_raw_stream, torch.cuda.set_device(...) -> dropped
    with torch.cuda._DeviceGuard(i): -> its body
    triton_helpers.maximum/minimum   -> tl.maximum/tl.minimum (max2/min2 -> tl.max/tl.min)
    libdevice, tl_math               -> triton.language.extra.libdevice, triton.language.math
    extern_kernels.mm/addmm/bmm/...  -> the torch op of the same name (the evaluator then decides
                                        whether torch compute is allowed: by default it is not)
    triton_poi_fused_0 (kernel names) -> kb_poi_fused_0: on the GPU the evaluator takes kernels named as
                                        Inductor names them for torch.compile's, which a candidate may not run

Anything else internal is left untouched, so the evaluator rejects it and says why. The model is
then trained on code that our evaluator accepts, which is what RL will ask it to write.
"""

from __future__ import annotations

import ast

from kbencheval.eval.contract.device_kernels import INDUCTOR_KERNEL_NAME

# Public stand-ins for TorchInductor's runtime helpers, each added only where the code uses it.
HELPERS = {
    "grid": '''def grid(*numels):
    def grid_fn(meta):
        blocks = (meta.get("XBLOCK", 1), meta.get("YBLOCK", 1), meta.get("ZBLOCK", 1))
        return tuple(triton.cdiv(n, b) for n, b in zip(numels, blocks))
    return grid_fn''',
    "empty_strided_cuda": '''def empty_strided_cuda(size, stride, dtype):
    return torch.empty_strided(size, stride, dtype=dtype, device=DEVICE)''',
    "reinterpret_tensor": '''def reinterpret_tensor(base, size, stride, offset=0):
    return torch.as_strided(base, size, stride, base.storage_offset() + offset)''',
    "extern_kernels": '''class extern_kernels:
    mm = torch.mm
    addmm = torch.addmm
    bmm = torch.bmm
    baddbmm = torch.baddbmm
    convolution = torch.convolution''',
}
DEVICE_LINE = 'DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")'
DROPPED_CALLS = {"assert_size_stride", "get_raw_stream"}
HELPER_OPS = {"maximum": "maximum", "minimum": "minimum", "max2": "max", "min2": "min"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _internal_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith(("torch._inductor", "torch._C"))
    if isinstance(node, ast.Import):
        return any(a.name.startswith("torch._inductor") for a in node.names)
    return False


class _Rewrite(ast.NodeTransformer):
    """Statements returning None are dropped; a list is spliced in place (NodeTransformer's rules)."""

    def __init__(self, kernels_renamed: dict[str, str]):
        self.changed = False
        self.kernels_renamed = kernels_renamed

    def visit_FunctionDef(self, node):
        if node.name in self.kernels_renamed:
            self.changed = True
            node.name = self.kernels_renamed[node.name]
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.kernels_renamed:
            self.changed = True
            return ast.copy_location(ast.Name(self.kernels_renamed[node.id], node.ctx), node)
        return node

    def _drop(self):
        self.changed = True

    def visit_Import(self, node):
        return self._drop() if _internal_import(node) else node

    visit_ImportFrom = visit_Import

    def visit_Assign(self, node):
        if _dotted(node.value).startswith("torch._C") or self._dropped_call(node.value):
            return self._drop()  # assert_size_stride = torch._C._dynamo.guards..., stream0 = get_raw_stream(0)
        return self.generic_visit(node)

    def visit_Expr(self, node):
        return self._drop() if self._dropped_call(node.value) else self.generic_visit(node)

    def visit_With(self, node):
        guard = node.items[0].context_expr
        if len(node.items) == 1 and isinstance(guard, ast.Call) and _dotted(guard.func) == "torch.cuda._DeviceGuard":
            self.changed = True
            kept = []
            for stmt in node.body:
                new = self.visit(stmt)
                kept.extend(new if isinstance(new, list) else [new] if new is not None else [])
            return kept
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if _dotted(node.value) == "triton_helpers" and node.attr in HELPER_OPS:
            self.changed = True
            return ast.copy_location(ast.Attribute(ast.Name("tl", ast.Load()), HELPER_OPS[node.attr], node.ctx), node)
        return node

    @staticmethod
    def _dropped_call(value) -> bool:
        name = _dotted(value.func) if isinstance(value, ast.Call) else ""
        return name in DROPPED_CALLS or name == "torch.cuda.set_device"


def _fill_empty_bodies(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(getattr(node, "body", None), list) and not node.body:
            node.body = [ast.Pass()]


def normalise_inductor(source: str) -> str:
    """Inductor-style `source` on public APIs; source without Inductor helpers comes back unchanged."""
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    renamed = {name: "kb_" + name.removeprefix("triton_") for name in defined if INDUCTOR_KERNEL_NAME.match(name)}
    rewrite = _Rewrite({old: new for old, new in renamed.items() if new not in names | defined})  # no clash
    tree = rewrite.visit(tree)
    _fill_empty_bodies(tree)
    if not rewrite.changed:
        return source
    present = {ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
    imports = ["import torch", "import triton", "import triton.language as tl"]
    if "libdevice" in names:
        imports.append("from triton.language.extra import libdevice")
    if "tl_math" in names:
        imports.append("import triton.language.math as tl_math")
    helpers = [code for name, code in HELPERS.items() if name in names]
    if "empty_strided_cuda" in names:
        helpers.insert(0, DEVICE_LINE)
    header = [ast.parse(line).body[0] for line in imports if line not in present]
    prelude = ast.parse("\n\n".join(helpers)).body if helpers else []
    n_imports = next((k for k, n in enumerate(tree.body) if not isinstance(n, (ast.Import, ast.ImportFrom))),
                     len(tree.body))
    tree.body = header + tree.body[:n_imports] + prelude + tree.body[n_imports:]
    return ast.unparse(tree) + "\n"
