"""The judge's fused comparison kernels give the torch path's answers (judge_kernels vs compare.compare_torch).

On the CPU they run under the Triton interpreter in a child process (TRITON_INTERPRET must be set
before Triton is imported); on a GPU, compiled, on larger tensors and through compare_tensor.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
SPECIAL = float("nan"), float("inf"), float("-inf")


def cases(n: int):
    """(name, reference, candidate) pairs: noise within tolerance, a few elements beyond it, and every
    pairing of NaN, +Inf, -Inf and finite values placed in one tensor."""
    gen = torch.Generator().manual_seed(0)
    for dtype in DTYPES:
        r = torch.randn(n, generator=gen).to(dtype)
        close = (r.double() + 1e-6 * torch.randn(n, generator=gen, dtype=torch.float64)).to(dtype)
        yield f"{dtype} close", r, close
        off = close.clone()
        off[torch.randperm(n, generator=gen)[:7]] += 0.5
        yield f"{dtype} 7 off", r, off
        rs, gs = r.clone(), close.clone()
        k = 0
        for a in (*SPECIAL, 1.0):
            for b in (*SPECIAL, 1.0):
                rs[k * 97], gs[k * 97] = a, b  # spread over the first blocks, the last one partial
                k += 1
        yield f"{dtype} specials", rs, gs
    yield "empty", torch.zeros(0), torch.zeros(0)


def check_all(device: str) -> int:
    """Asserts the fused kernels equal the torch path on every case; returns how many were checked."""
    from kbencheval.eval.trusted import judge_kernels
    from kbencheval.eval.contract.inputs import row_squares_torch
    from kbencheval.eval.trusted.compare import compare_torch, finite_rms_torch

    n = 4096 * 2 + 1000 if device == "cpu" else (1 << 24) + 123  # a partial last block
    checked = 0
    for name, r, g in cases(n):
        r, g = r.to(device), g.to(device)
        for atol, rtol in ((1e-4, 1e-4), (1e-2, 0.0), (0.0, 0.0)):
            fused = judge_kernels.compare_fused(r, g, atol, rtol)
            oracle = compare_torch(r, g, atol, rtol)
            assert fused == oracle, (name, atol, rtol, fused, oracle)
        rms, rms_oracle = judge_kernels.finite_rms_fused(r), finite_rms_torch(r)
        assert math.isclose(rms, rms_oracle, rel_tol=1e-12), (name, rms, rms_oracle)
        if r.numel() >= 4096 and r.dtype == torch.float32:
            matrix = r[: r.numel() // 4096 * 4096].view(-1, 4096)
            assert torch.allclose(judge_kernels.row_squares_fused(matrix), row_squares_torch(matrix), rtol=1e-12,
                                  equal_nan=True)
        checked += 1
    # Known answers, so that both paths cannot be wrong alike: 7 elements off by 0.5, NaN/Inf mismatches.
    r = torch.zeros(n, device=device)
    g = r.clone()
    g[[3, 4096, n - 1]] = 0.5
    assert judge_kernels.compare_fused(r, g, 1e-4, 1e-4) == (0.5, 3, 0)
    g[5] = float("nan")
    r[6], g[6] = float("inf"), float("-inf")
    assert judge_kernels.compare_fused(r, g, 1e-4, 1e-4) == (0.5, 3, 2)
    return checked


def test_fused_comparisons_match_the_torch_path_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", "from tests.evaluator.test_judge_kernels import check_all; "
                           "print('checked', check_all('cpu'))"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "checked 13" in proc.stdout, proc.stdout[-500:] + proc.stderr[-3000:]


def test_the_judge_takes_the_torch_path_on_the_cpu():
    from kbencheval.eval.trusted import judge_kernels

    x = torch.ones(4)
    assert not judge_kernels.usable(x) and not judge_kernels.usable(x.to(torch.complex64))


@pytest.mark.gpu
def test_fused_comparisons_match_the_torch_path_on_the_gpu():
    assert check_all("cuda") == 13


@pytest.mark.gpu
def test_compare_tensor_uses_the_kernels_on_the_gpu(monkeypatch):
    from kbencheval.eval.trusted import compare, judge_kernels

    r = torch.randn(1 << 20, device="cuda")
    g = r.clone()
    g[17] += 1.0
    calls = []
    monkeypatch.setattr(judge_kernels, "compare_queued",
                        lambda *a: calls.append(a) or compare.compare_torch_queued(*a))
    message, stats = compare.compare_tensor(0, r, g, {}, scale_atol=True)
    assert calls and "mismatch" in message and "0.0%" in message and stats["output0_max_abs_diff"] == pytest.approx(1.0)
