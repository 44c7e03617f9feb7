"""The static allow-list (kbencheval.extract.static_check) has no way around it through a module bound
to another name or a Tensor subclass made another way; the bundled solutions still pass it.

    pytest tests/adversarial/test_static_allowlist.py

Threat table (docs/evaluator.md): "no tampering with harness objects" (the static allow-list, a tripwire)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbencheval.extract import static_check

REPO = Path(__file__).resolve().parents[2]
HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
KERNEL = "\n@triton.jit\ndef k(x_ptr, B: tl.constexpr):\n    pass\n"

ESCAPES = {  # each of these got past the allow-list before: a module under a local name reached anything
    "module bound to a name, then patched": ("m = torch\nm.empty = None\n", "uses module 'torch' as a value"),
    "module as a default argument": ("def f(x=torch):\n    return x\n", "uses module 'torch' as a value"),
    "module in a container": ("mods = [torch]\n", "uses module 'torch' as a value"),
    "submodule bound to a name": ("F2 = nn.functional\n", "uses module 'nn.functional' as a value"),
    "nn.Parameter subclass": ("class X(nn.Parameter):\n    pass\n", "subclasses a Tensor type"),
    "torch.nn.Parameter subclass": ("class X(torch.nn.Parameter):\n    pass\n", "subclasses a Tensor type"),
    "Tensor subclass made by type()": ("X = type('X', (torch.Tensor,), {})\n", "calls type() with a class body"),
    "computed base class": ("class X(type(torch.ones(1))):\n    pass\n", "computed base class"),
}


@pytest.mark.parametrize("name", ESCAPES)
def test_a_module_or_tensor_type_cannot_escape_the_allowlist(name):
    body, expected = ESCAPES[name]
    report = static_check(HEADER + KERNEL + body, "triton")
    assert not report.ok and any(expected in v for v in report.violations), report.violations


def test_honest_uses_of_modules_still_pass():
    body = ("from triton.language import constexpr\n\n@triton.jit\ndef add(x_ptr, y_ptr, n, BLOCK: constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs))\n\n"
            "class ModelNew(nn.Module):\n    def forward(self, x):\n        assert isinstance(x, torch.Tensor)\n"
            "        return torch.nn.functional.relu(x)\n")
    assert static_check(HEADER + body, "triton").violations == []


def test_every_bundled_solution_passes():
    solutions = sorted((REPO / "kbencheval" / "problems" / "solutions").rglob("*.py"))
    assert len(solutions) >= 40
    for path in solutions:
        code = path.read_text()
        backend = "cuda" if "load_inline" in code else "triton"
        assert static_check(code, backend).violations == [], path.name
