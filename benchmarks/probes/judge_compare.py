"""The judge's comparisons: torch ops against the fused kernels, side by side (GPU only).

    python benchmarks/probes/judge_compare.py --out runs/probes/judge_compare.json

For each output size and dtype, the median milliseconds (device synced) of what the judge runs on
one candidate output: the tolerance check (`compare`), the stress trials' RMS (`rms`), and the
digest bounds of a timed output (`bounds`), in torch ops (compare.compare_torch, finite_rms_torch,
inputs.row_squares_torch) and in judge_kernels' fused kernels. Both must give the same answer; the
script stops if they do not.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kbencheval.eval.trusted import judge_kernels  # noqa: E402
from kbencheval.eval.contract.inputs import DIGEST_WIDTH, row_squares_torch  # noqa: E402
from kbencheval.eval.trusted.compare import compare_torch, finite_rms_torch  # noqa: E402

SIZES = [(1 << 23, torch.float32), (1 << 26, torch.float32), (1 << 28, torch.float32), (1 << 26, torch.bfloat16)]


def median_ms(fn, repeats: int):
    fn()  # compiles the kernel, warms the allocator
    times, value = [], None
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        value = fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 3), value


def one_size(n: int, dtype: torch.dtype, repeats: int) -> dict:
    r = torch.randn(n, device="cuda").to(dtype)
    g = (r.double() + 1e-6 * torch.randn(n, device="cuda", dtype=torch.float64)).to(dtype)
    matrix = r.float()[: n // DIGEST_WIDTH * DIGEST_WIDTH].view(-1, DIGEST_WIDTH)
    row = {"elements": n, "dtype": str(dtype).removeprefix("torch."), "gb": round(n * r.element_size() / 2**30, 3)}
    for name, torch_fn, fused_fn, same in (
            ("compare", lambda: compare_torch(r, g, 1e-4, 1e-4), lambda: judge_kernels.compare_fused(r, g, 1e-4, 1e-4),
             lambda a, b: a == b),
            ("rms", lambda: finite_rms_torch(r), lambda: judge_kernels.finite_rms_fused(r),
             lambda a, b: math.isclose(a, b, rel_tol=1e-12)),
            ("bounds", lambda: row_squares_torch(matrix), lambda: judge_kernels.row_squares_fused(matrix),
             lambda a, b: torch.allclose(a, b, rtol=1e-12))):
        row[f"{name}_torch_ms"], expected = median_ms(torch_fn, repeats)
        row[f"{name}_fused_ms"], got = median_ms(fused_fn, repeats)
        if not same(expected, got):
            raise SystemExit(f"{name} on {n} {dtype}: fused {got} differs from torch {expected}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/probes/judge_compare.json")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA or ROCm GPU: it times the judge's GPU comparisons (run it on the GPU machine)")
    rows = []
    for n, dtype in SIZES:
        rows.append(one_size(n, dtype, args.repeats))
        torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "rows": rows}, indent=1))
    names = [k for k in rows[0] if k.endswith("_ms")]
    print("ms per output (median, device synced):")
    print(f"{'elements':>11s} {'dtype':>9s}" + "".join(f"{n.removesuffix('_ms'):>16s}" for n in names))
    for row in rows:
        print(f"{row['elements']:>11d} {row['dtype']:>9s}" + "".join(f"{row[n]:16.3f}" for n in names))


if __name__ == "__main__":
    main()
