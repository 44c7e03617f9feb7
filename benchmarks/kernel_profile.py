"""Where a training pass's GPU time goes: one call under torch.profiler, kernels grouped by what they do.

Used by benchmarks/train_throughput.py --profile. Categories come from kernel names (cuBLAS/CUTLASS
GEMMs, SDPA's flash and memory-efficient kernels, the multi-tensor kernels of Adam and gradient
clipping, NCCL, softmax and log-softmax of the vocabulary head). `busy_ms` is the union of kernel
intervals over all streams, so `host_gap_ms` = wall - busy is time the GPU sat idle waiting for the
host (launch overhead, .item() syncs, Python); overlapping streams make category sums exceed busy.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

# First match wins: attention before softmax (flash kernels mention softmax), optimizer before elementwise.
CATEGORIES = [
    ("attention", re.compile(r"flash|fmha|attention|efficient_attention|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|nvjet|cublas|xmma|matmul|splitk", re.I)),
    ("nccl", re.compile(r"nccl", re.I)),
    ("optimizer_and_clip", re.compile(r"adam|multi_tensor|foreach|fused_optim", re.I)),
    ("softmax_and_loss", re.compile(r"softmax|logsumexp|cross_entropy|nll_loss", re.I)),
    ("copy_and_cast", re.compile(r"copy|memcpy|memset|cast|catarray|fill", re.I)),
    ("reduction", re.compile(r"reduce", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|triton", re.I)),
]


def category(kernel_name: str) -> str:
    return next((name for name, pattern in CATEGORIES if pattern.search(kernel_name)), "other")


def union_ms(intervals_us: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals in microseconds, returned in milliseconds."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals_us):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total / 1e3


def summarize(kernels: Iterable[tuple[str, float, float]], wall_ms: float) -> dict:
    """kernels: (name, start_us, end_us) of every GPU kernel in one call -> ms per category, busy, host gap."""
    kernels = list(kernels)
    per_category: dict[str, float] = {}
    top: dict[str, float] = {}
    for name, start, end in kernels:
        ms, kind = (end - start) / 1e3, category(name)
        per_category[kind] = per_category.get(kind, 0.0) + ms
        top[name] = top.get(name, 0.0) + ms
    busy = union_ms((start, end) for _, start, end in kernels)
    heaviest = sorted(top.items(), key=lambda kv: -kv[1])[:8]
    return {"wall_ms": wall_ms, "busy_ms": busy, "host_gap_ms": max(0.0, wall_ms - busy), "kernels": len(kernels),
            "ms_by_category": dict(sorted(per_category.items(), key=lambda kv: -kv[1])),
            "heaviest_kernels": [{"name": name[:120], "ms": ms} for name, ms in heaviest]}


def profile_call(fn: Callable[[], object]) -> dict:
    """Run fn once under torch.profiler (CUDA kernels recorded) and summarize its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3
    # user annotations (torch.optim's "Optimizer.step#AdamW.step") are ranges on the GPU timeline, not kernels:
    # counted, they would add their span to a category and the gaps inside it to busy time
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    return summarize(kernels, wall_ms)
