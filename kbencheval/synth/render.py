"""A `Spec` (tree + tail + shapes + dtype) rendered as a KernelBench problem and as Triton solutions.

Solution variants (the speed reward has something to prefer):
  elementwise: fused_b1024, fused_b256, fused_b4096 (one kernel, three block sizes) and unfused (two
               kernels, the root's largest subtree stored to an fp32 temp and read back)
  with a tail: fused_w4, fused_w8 (one program per row, expression and tail fused; num_warps 4/8) and
               unfused (an elementwise kernel writes the expression, a row kernel applies the tail)
  both:        per_op (one kernel per operator, each result an fp32 temp: a line-by-line translation that
               launches as many kernels as eager PyTorch and moves more bytes, so it is no faster than the
               reference, except with an rmsnorm tail, five kernels in eager and one here; the speed stage's
               slow variant), listed last
The kernels compute in fp32 and cast once on store. Two styles of writing the expression:
  ssa:    one statement per operator in post-order (t1 = ...; t2 = ...), the first GPU learning runs' data
  inline: one nested expression shaped like the PyTorch one, with @triton.jit helpers (_silu, _clamp, ...)
          where Triton has no single call, so translating is a token-by-token rewrite
"""

from __future__ import annotations

import dataclasses

from kbencheval.synth.grammar import Node, inline_helpers, split_subtree, to_torch, to_triton, to_triton_inline

STYLES = ("ssa", "inline", "mixed")  # mixed: each variant in both styles, inline first
VARIANTS = ("fused_b1024", "fused_b256", "fused_b4096", "fused_w4", "fused_w8", "unfused", "per_op")
# a set keeps per_op only when it names it: it is 2-4 times longer than the others, and sets made before it existed
# stay the same
DEFAULT_VARIANTS = tuple(v for v in VARIANTS if v != "per_op")

_TORCH_DTYPE = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16"}
# Half-precision references round after every op while the kernels round once; deep trees need room.
_TOLERANCE = {"float16": {"atol": 2e-2, "rtol": 2e-2}, "bfloat16": {"atol": 6e-2, "rtol": 6e-2}}
_TAIL_TORCH = {
    "none": "y",
    "rowsum": "torch.sum(y, dim=1)",
    "rowmax": "torch.amax(y, dim=1)",
    "rowmean": "torch.mean(y, dim=1)",
    "softmax": "torch.softmax(y, dim=1)",
    "layernorm": "F.layer_norm(y, (y.shape[1],))",
    "rmsnorm": "y * torch.rsqrt(torch.mean(y * y, dim=1, keepdim=True) + 1e-6)",
}
_TAIL_DOC = {"none": "", "rowsum": ", then a sum over each row", "rowmax": ", then the max of each row",
             "rowmean": ", then the mean of each row", "softmax": ", then a softmax over each row",
             "layernorm": ", then layer norm over each row (no affine)", "rmsnorm": ", then RMS norm over each row"}
_REDUCING = ("rowsum", "rowmax", "rowmean")
_HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


@dataclasses.dataclass(frozen=True)
class Spec:
    tree: Node
    tail: str
    num_inputs: int
    dtype: str
    batch: int
    dim: int
    small_batch: int
    small_dim: int


def _names(n: int) -> list[str]:
    return [f"x{i}" for i in range(n)]


def problem_source(spec: Spec) -> str:
    names = _names(spec.num_inputs)
    expr = to_torch(spec.tree, names)
    dtype = _TORCH_DTYPE[spec.dtype]
    tolerance = f"TOLERANCE = {_TOLERANCE[spec.dtype]!r}\n" if spec.dtype in _TOLERANCE else ""
    return f'''"""Synthetic: an elementwise expression of {spec.num_inputs} {spec.dtype} input(s){_TAIL_DOC[spec.tail]}."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = {spec.batch}
dim = {spec.dim}

SMALL_SIZES = {{"batch_size": {spec.small_batch}, "dim": {spec.small_dim}}}
{tolerance}

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {", ".join(names)}):
        y = {expr}
        return {_TAIL_TORCH[spec.tail]}


def get_inputs():
    return [torch.randn(batch_size, dim, dtype={dtype}) for _ in range({spec.num_inputs})]


def get_init_inputs():
    return []
'''


def _indent(lines: list[str], n: int = 4) -> str:
    return "\n".join(" " * n + line for line in lines)


def _expression(tree: Node, names: list[str], body: list[str], style: str, result: str = "y") -> str:
    """Append the statements computing `tree` to body; return the name holding its value (`result` in
    the inline style, the last temporary in ssa)."""
    if style == "inline":
        body.append(f"{result} = {to_triton_inline(tree, names)}")
        return result
    return to_triton(tree, names, body, [0])


def _elementwise_kernel(name: str, tree: Node, inputs: list[int], style: str) -> str:
    """A flat kernel over n_elements: load the inputs it uses, compute the tree, store."""
    names = [f"x{i}" for i in range(4)]
    body = [f"{names[i]} = tl.load({names[i]}_ptr + offsets, mask=mask).to(tl.float32)" for i in inputs]
    result = _expression(tree, names, body, style)
    ptrs = ", ".join(f"{names[i]}_ptr" for i in inputs)
    return f'''@triton.jit
def {name}({ptrs}, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
{_indent(body)}
    tl.store(out_ptr + offsets, {result}.to(out_ptr.dtype.element_ty), mask=mask)
'''


def _tail_lines(tail: str, v: str) -> list[str]:
    """Triton statements applying the tail to row values `v` (masked lanes hold garbage), storing to out."""
    store_row = "tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)"
    store_one = "tl.store(out_ptr + row, y.to(out_ptr.dtype.element_ty))"
    if tail == "rowsum":
        return [f"y = tl.sum(tl.where(mask, {v}, 0.0), axis=0)", store_one]
    if tail == "rowmean":
        return [f"y = tl.sum(tl.where(mask, {v}, 0.0), axis=0) / n_cols", store_one]
    if tail == "rowmax":
        return [f"y = tl.max(tl.where(mask, {v}, -float(\"inf\")), axis=0)", store_one]
    if tail == "softmax":
        return [f"z = tl.where(mask, {v}, -float(\"inf\"))", "e = tl.exp(z - tl.max(z, axis=0))",
                "y = e / tl.sum(e, axis=0)", store_row]
    if tail == "layernorm":
        return [f"mean = tl.sum(tl.where(mask, {v}, 0.0), axis=0) / n_cols",
                f"d = tl.where(mask, {v} - mean, 0.0)", "var = tl.sum(d * d, axis=0) / n_cols",
                "y = d * tl.rsqrt(var + 1e-5)", store_row]
    if tail == "rmsnorm":
        return [f"z = tl.where(mask, {v}, 0.0)", "ms = tl.sum(z * z, axis=0) / n_cols",
                f"y = {v} * tl.rsqrt(ms + 1e-6)", store_row]
    raise ValueError(f"unknown tail '{tail}'")


def _row_kernel(name: str, tree: Node, inputs: list[int], tail: str, style: str) -> str:
    """One program per row: load the row of each input, compute the tree, apply the tail."""
    names = [f"x{i}" for i in range(4)]
    body = [f"{names[i]} = tl.load({names[i]}_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)"
            for i in inputs]
    result = _expression(tree, names, body, style, result="v")  # the tail's own statements assign y
    body += _tail_lines(tail, result)
    ptrs = ", ".join(f"{names[i]}_ptr" for i in inputs)
    return f'''@triton.jit
def {name}({ptrs}, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
{_indent(body)}
'''


def _model_new(num_inputs: int, body: list[str]) -> str:
    names = _names(num_inputs)
    contiguous = f"{', '.join(names)} = {', '.join(n + '.contiguous()' for n in names)}"
    return f'''class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {", ".join(names)}):
        {contiguous}
{_indent(body, 8)}
'''


def _args(inputs: list[int]) -> str:
    return ", ".join(f"x{i}" for i in inputs)


def _source(kernels: str, model_new: str, helpers: str) -> str:
    return f"{_HEADER}\n\n" + (f"{helpers}\n\n" if helpers else "") + f"{kernels}\n\n{model_new}"


def _elementwise_variants(spec: Spec, style: str) -> dict[str, str]:
    inputs = sorted(spec.tree.inputs_used())
    helpers = inline_helpers(spec.tree) if style == "inline" else ""
    kernel = _elementwise_kernel("fused_kernel", spec.tree, inputs, style)
    out = {}
    for block in (1024, 256, 4096):  # the first is canonical
        body = ["out = torch.empty_like(x0)", "n = x0.numel()",
                f"fused_kernel[(triton.cdiv(n, {block}),)]({_args(inputs)}, out, n, BLOCK={block})", "return out"]
        out[f"fused_b{block}"] = _source(kernel, _model_new(spec.num_inputs, body), helpers)
    parts = split_subtree(spec.tree)
    if parts:
        first, rest = parts
        first_in, rest_in = sorted(first.inputs_used()), sorted(rest.inputs_used())
        kernels = _elementwise_kernel("first_kernel", first, first_in, style) + "\n\n" + \
            _elementwise_kernel("second_kernel", rest, rest_in, style)
        body = ["n = x0.numel()", "grid = (triton.cdiv(n, 1024),)",
                "x3 = torch.empty_like(x0, dtype=torch.float32)",
                f"first_kernel[grid]({_args(first_in)}, x3, n, BLOCK=1024)",
                "out = torch.empty_like(x0)",
                f"second_kernel[grid]({_args(rest_in)}, out, n, BLOCK=1024)", "return out"]
        out["unfused"] = _source(kernels, _model_new(spec.num_inputs, body), helpers)
    kernels, temps, root = _per_op(spec.tree, style)
    body = ["n = x0.numel()", "grid = (triton.cdiv(n, 1024),)", *temps, "out = torch.empty_like(x0)",
            root.replace("OUT", "out"), "return out"]
    out["per_op"] = _source(kernels, _model_new(spec.num_inputs, body), helpers)
    return out


def _per_op(tree: Node, style: str) -> tuple[str, list[str], str]:
    """One elementwise kernel per operator, in post-order, each writing an fp32 temp (t1, t2, ...); operators
    with the same kernel share its definition. Returns (kernel sources, the forward's launch lines before the
    root's, the root's launch line with OUT for its output)."""
    kernels: dict[str, str] = {}  # kernel source with NAME for its name -> its name
    launches: list[str] = []

    def visit(node: Node) -> str:
        if node.op == "input":
            return f"x{node.index}"
        args = [visit(child) for child in node.children]
        one_op = dataclasses.replace(node, children=tuple(Node("input", index=i) for i in range(len(args))))
        source = _elementwise_kernel("NAME", one_op, list(range(len(args))), style)
        name = kernels.setdefault(source, f"op{len(kernels) + 1}_kernel")
        launches.append(f"{name}[grid]({', '.join(args)}, OUT, n, BLOCK=1024)")
        return f"t{len(launches)}"

    visit(tree)
    temps = [f"t{i} = torch.empty_like(x0, dtype=torch.float32)\n" + line.replace("OUT", f"t{i}")
             for i, line in enumerate(launches[:-1], start=1)]
    sources = "\n\n".join(source.replace("def NAME(", f"def {name}(") for source, name in kernels.items())
    return sources, [line for pair in temps for line in pair.split("\n")], launches[-1]


def _row_variants(spec: Spec, style: str) -> dict[str, str]:
    inputs = sorted(spec.tree.inputs_used())
    helpers = inline_helpers(spec.tree) if style == "inline" else ""
    alloc = ("out = torch.empty((n_rows,), dtype=x0.dtype, device=x0.device)" if spec.tail in _REDUCING
             else "out = torch.empty_like(x0)")
    head = ["n_rows, n_cols = x0.shape", "block = triton.next_power_of_2(n_cols)", alloc]
    kernel = _row_kernel("fused_row_kernel", spec.tree, inputs, spec.tail, style)
    out = {}
    for warps in (4, 8):
        body = head + [f"fused_row_kernel[(n_rows,)]({_args(inputs)}, out, n_cols, BLOCK=block, num_warps={warps})",
                       "return out"]
        out[f"fused_w{warps}"] = _source(kernel, _model_new(spec.num_inputs, body), helpers)
    kernels = _elementwise_kernel("expr_kernel", spec.tree, inputs, style) + "\n\n" + \
        _row_kernel("tail_kernel", Node("input", index=3), [3], spec.tail, "ssa")  # the tail reads x3 as is
    body = head + ["x3 = torch.empty_like(x0, dtype=torch.float32)", "n = x0.numel()",
                   f"expr_kernel[(triton.cdiv(n, 1024),)]({_args(inputs)}, x3, n, BLOCK=1024)",
                   "tail_kernel[(n_rows,)](x3, out, n_cols, BLOCK=block, num_warps=4)", "return out"]
    out["unfused"] = _source(kernels, _model_new(spec.num_inputs, body), helpers)
    kernels, temps, root = _per_op(spec.tree, style)
    kernels += "\n\n" + _row_kernel("tail_kernel", Node("input", index=3), [3], spec.tail, "ssa")
    body = head + ["n = x0.numel()", "grid = (triton.cdiv(n, 1024),)", *temps,
                   "x3 = torch.empty_like(x0, dtype=torch.float32)", root.replace("OUT", "x3"),
                   "tail_kernel[(n_rows,)](x3, out, n_cols, BLOCK=block, num_warps=4)", "return out"]
    out["per_op"] = _source(kernels, _model_new(spec.num_inputs, body), helpers)
    return out


def solution_variants(spec: Spec, style: str = "ssa") -> dict[str, str]:
    """Variant name -> complete solution source, the expression written in `style` (STYLES). The first
    entry is the canonical solution."""
    if style not in STYLES:
        raise ValueError(f"unknown solution style '{style}': use one of {', '.join(STYLES)}")
    if style == "mixed":  # inline_V, ssa_V for each variant V: the first two are the canonical one in both styles
        inline, ssa = solution_variants(spec, "inline"), solution_variants(spec, "ssa")
        return {f"{name}_{variant}": styled[variant] for variant in inline for name, styled in
                (("inline", inline), ("ssa", ssa))}
    return _elementwise_variants(spec, style) if spec.tail == "none" else _row_variants(spec, style)
