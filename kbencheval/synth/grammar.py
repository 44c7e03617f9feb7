"""Expression trees of the synthetic problems: sampling, the operator pairs they contain, and rendering.

A tree is built from inputs (x0..x2), unary activations, binary ops over two subtrees, scalar ops
with a constant (scale, shift) and clamps. One tree renders twice: as a PyTorch expression for the
problem's `Model.forward` and as a Triton expression (computed in fp32) for the solution's kernel,
so the two compute the same function by construction; the evaluator still checks every pair.
"""

from __future__ import annotations

import dataclasses
import random

UNARY = ("relu", "sigmoid", "tanh", "silu", "gelu", "abs", "neg", "square")
BINARY = ("add", "sub", "mul", "maximum", "minimum")
SCALAR = ("scale", "shift")
CLAMP = "clamp"
TAILS = ("none", "rowsum", "rowmax", "rowmean", "softmax", "layernorm", "rmsnorm")
OPS = UNARY + BINARY + SCALAR + (CLAMP,)
CONSTANTS = (0.5, 2.0, 0.25, 1.5, 3.0, -1.0, 0.1, -0.5)
CLAMP_RANGES = ((-1.0, 1.0), (0.0, 6.0), (-0.5, 2.0), (-3.0, 0.5))

_TORCH_UNARY = {
    "relu": "torch.relu({})", "sigmoid": "torch.sigmoid({})", "tanh": "torch.tanh({})",
    "silu": "F.silu({})", "gelu": "F.gelu({}, approximate=\"tanh\")", "abs": "torch.abs({})",
    "neg": "(-{})", "square": "torch.square({})",
}
_TORCH_BINARY = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})",
                 "maximum": "torch.maximum({}, {})", "minimum": "torch.minimum({}, {})"}
# tanh(z) = 2 sigmoid(2z) - 1 and gelu_tanh(x) = x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)): exact
# identities that need only tl.sigmoid, which every Triton backend (and the interpreter) has.
_TRITON_UNARY = {
    "relu": "tl.maximum({0}, 0.0)", "sigmoid": "tl.sigmoid({0})", "tanh": "(2.0 * tl.sigmoid(2.0 * {0}) - 1.0)",
    "silu": "({0} * tl.sigmoid({0}))",
    "gelu": "({0} * tl.sigmoid(1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0})))",
    "abs": "tl.abs({0})", "neg": "(-{0})", "square": "({0} * {0})",
}
_TRITON_BINARY = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})",
                  "maximum": "tl.maximum({}, {})", "minimum": "tl.minimum({}, {})"}


@dataclasses.dataclass(frozen=True)
class Node:
    op: str
    """'input', one of OPS."""
    children: tuple["Node", ...] = ()
    index: int = 0
    """input: which input (x0, x1, x2)."""
    consts: tuple[float, ...] = ()
    """scale/shift: (c,); clamp: (lo, hi)."""

    def preorder(self):
        yield self
        for child in self.children:
            yield from child.preorder()

    @property
    def num_ops(self) -> int:
        return sum(1 for n in self.preorder() if n.op != "input")

    @property
    def depth(self) -> int:
        """Operators on the longest path from the root to an input (an input alone: 0)."""
        return 0 if self.op == "input" else 1 + max(c.depth for c in self.children)

    def inputs_used(self) -> set[int]:
        return {n.index for n in self.preorder() if n.op == "input"}

    def signature(self) -> str:
        """Structure with operators but no constants or input indices: what the split is keyed on."""
        if self.op == "input":
            return "x"
        return f"{self.op}({','.join(c.signature() for c in self.children)})"

    def canonical(self) -> str:
        """Everything: two problems with the same canonical string compute the same function."""
        if self.op == "input":
            return f"x{self.index}"
        extra = "".join(f"|{c:g}" for c in self.consts)
        return f"{self.op}{extra}({','.join(c.canonical() for c in self.children)})"


def sample_tree(rng: random.Random, num_inputs: int, max_depth: int = 3) -> Node:
    """A random tree over `num_inputs` inputs that uses every input and has at least two operators."""
    for _ in range(100):
        tree = _sample(rng, num_inputs, max_depth)
        for missing in sorted(set(range(num_inputs)) - tree.inputs_used()):
            tree = Node(rng.choice(BINARY), (tree, Node("input", index=missing)))
        if tree.num_ops >= 2:
            return tree
    raise RuntimeError("could not sample a tree with two operators")  # unreachable in practice


def _sample(rng: random.Random, num_inputs: int, depth: int) -> Node:
    if depth == 0 or rng.random() < 0.2:
        return Node("input", index=rng.randrange(num_inputs))
    kind = rng.choices(("unary", "binary", "scalar", "clamp"), weights=(4, 4, 2, 1))[0]
    if kind == "unary":
        return Node(rng.choice(UNARY), (_sample(rng, num_inputs, depth - 1),))
    if kind == "binary":
        return Node(rng.choice(BINARY), (_sample(rng, num_inputs, depth - 1), _sample(rng, num_inputs, depth - 1)))
    if kind == "scalar":
        return Node(rng.choice(SCALAR), (_sample(rng, num_inputs, depth - 1),), consts=(rng.choice(CONSTANTS),))
    return Node(CLAMP, (_sample(rng, num_inputs, depth - 1),), consts=rng.choice(CLAMP_RANGES))


def operator_pairs(tree: Node, tail: str) -> set[tuple[str, str]]:
    """(parent, child) operator pairs, the tail counting as the root's parent. Inputs are not operators."""
    pairs = set()
    if tail != "none":
        pairs.add((tail, tree.op if tree.op != "input" else "x"))
    for node in tree.preorder():
        for child in node.children:
            if child.op != "input":
                pairs.add((node.op, child.op))
    return pairs


def all_pairs() -> list[tuple[str, str]]:
    """Every pair the grammar can produce, in a fixed order (the held-out pairs are drawn from it)."""
    inner = [(p, c) for p in OPS for c in OPS]
    return inner + [(t, c) for t in TAILS if t != "none" for c in OPS]


def _nested(node: Node, names: list[str], unary: dict, binary: dict, clamp: str) -> str:
    """The tree as one nested expression, each operator written from its template."""
    if node.op == "input":
        return names[node.index]
    args = [_nested(c, names, unary, binary, clamp) for c in node.children]
    if node.op in unary:
        return unary[node.op].format(*args)
    if node.op in binary:
        return binary[node.op].format(*args)
    if node.op == "scale":
        return f"({args[0]} * {node.consts[0]!r})"
    if node.op == "shift":
        return f"({args[0]} + {node.consts[0]!r})"
    lo, hi = node.consts
    return clamp.format(args[0], repr(lo), repr(hi))


def to_torch(node: Node, names: list[str]) -> str:
    return _nested(node, names, _TORCH_UNARY, _TORCH_BINARY, "torch.clamp({}, {}, {})")


def to_triton(node: Node, names: list[str], lines: list[str], counter: list[int]) -> str:
    """Append `tN = ...` statements to `lines` (one per operator, so no expression is duplicated when a
    template repeats its argument) and return the name holding this node's value."""
    if node.op == "input":
        return names[node.index]
    args = [to_triton(c, names, lines, counter) for c in node.children]
    if node.op in _TRITON_UNARY:
        expr = _TRITON_UNARY[node.op].format(*args)
    elif node.op in _TRITON_BINARY:
        expr = _TRITON_BINARY[node.op].format(*args)
    elif node.op == "scale":
        expr = f"{args[0]} * {node.consts[0]!r}"
    elif node.op == "shift":
        expr = f"{args[0]} + {node.consts[0]!r}"
    else:
        lo, hi = node.consts
        expr = f"tl.minimum(tl.maximum({args[0]}, {lo!r}), {hi!r})"
    counter[0] += 1
    name = f"t{counter[0]}"
    lines.append(f"{name} = {expr}")
    return name


# The inline style: one nested Triton expression that mirrors the PyTorch one token for token, with
# small @triton.jit helpers where Triton has no single call (each helper computes what _TRITON_UNARY does).
_INLINE_UNARY = {
    "relu": "_relu({})", "sigmoid": "tl.sigmoid({})", "tanh": "_tanh({})", "silu": "_silu({})",
    "gelu": "_gelu({})", "abs": "tl.abs({})", "neg": "(-{})", "square": "_square({})",
}
INLINE_HELPERS = {  # op -> helper source, in the order they are written
    "relu": "@triton.jit\ndef _relu(x):\n    return tl.maximum(x, 0.0)\n",
    "tanh": "@triton.jit\ndef _tanh(x):\n    return 2.0 * tl.sigmoid(2.0 * x) - 1.0\n",
    "silu": "@triton.jit\ndef _silu(x):\n    return x * tl.sigmoid(x)\n",
    "gelu": "@triton.jit\ndef _gelu(x):\n    return x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))\n",
    "square": "@triton.jit\ndef _square(x):\n    return x * x\n",
    "clamp": "@triton.jit\ndef _clamp(x, lo, hi):\n    return tl.minimum(tl.maximum(x, lo), hi)\n",
}


def to_triton_inline(node: Node, names: list[str]) -> str:
    """The tree as one Triton expression, shaped like to_torch's (helpers from INLINE_HELPERS)."""
    return _nested(node, names, _INLINE_UNARY, _TRITON_BINARY, "_clamp({}, {}, {})")


def inline_helpers(*trees: Node) -> str:
    """Source of the helpers the trees' inline expressions call, in INLINE_HELPERS' order."""
    used = {n.op for tree in trees for n in tree.preorder()}
    return "\n\n".join(src for op, src in INLINE_HELPERS.items() if op in used)


def split_subtree(tree: Node) -> tuple[Node, Node] | None:
    """For the two-kernel variant: (first, rest) where `first` is the root's largest operator child
    and `rest` is the tree with that child replaced by a new input (index 3, the temp buffer)."""
    candidates = [(c.num_ops, i) for i, c in enumerate(tree.children) if c.op != "input"]
    if not candidates:
        return None
    _, i = max(candidates)
    children = list(tree.children)
    first = children[i]
    children[i] = Node("input", index=3)
    return first, dataclasses.replace(tree, children=tuple(children))
