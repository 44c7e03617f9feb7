"""Which kernels ran on the device, and whether they were the candidate's (issue #17, third item).

The worker lists the kernels of the work it times: the kernel nodes of the CUDA graph it replays in
the timed loop (`graph_kernels`), or, for a model that cannot be captured, the device kernels the
profiler saw during one eager call (`profiled_kernels`). The harness, which imports this module
without torch, classifies the names against the problem's allowed ops (`kernel_violation`).

Why names can be trusted in one direction: a library's kernels keep the names they were compiled
with (a candidate cannot rename cuBLAS's `sm90_xmma_gemm_*` or ATen's `_ZN2at6native*` without
extracting and rewriting the library's binaries), so library work shows up as library work. A
candidate that names its own Triton kernel like a library kernel only gets itself rejected.
"""

from __future__ import annotations

import ctypes
import re
from collections import Counter
from ctypes import Structure, byref, c_char_p, c_int, c_size_t, c_uint, c_void_p

# --- classification (pure, CPU-testable) -----------------------------------------------------------

# A C++ kernel: mangled (from a graph node: `_ZN2at6native...`) or demangled (from the profiler:
# `void at::native::...(...)`). Triton names a kernel after its Python function, an identifier, so a
# Triton candidate never produces one; only backend=cuda candidates write C++ kernels of their own.
CPP_NAME = re.compile(r"^_Z|::|[<(]")

# Memory-only ATen kernels behind the ops every candidate may call (recorders.ALWAYS_ALLOWED:
# zeros/full/fill_/zero_, clone/contiguous/to/copy_, arange). Checked before anything else.
MEMORY_ONLY = re.compile(r"(at6native|at::native).*(FillFunctor|(direct|b?float(16|8)|bfloat16tofloat32)_copy_kernel_cuda"
                         r"|arange_cuda_out)")

# torch.compile: Inductor names its Triton kernels triton_<category>_<fused ops>_<n>, the category cut to
# three letters (pointwise, reduction, persistent_reduction, template, foreach, split_scan). A candidate's
# own kernel with such a name is taken for torch.compile's (kbencheval/corpus/inductor.py renames them).
INDUCTOR_KERNEL_NAME = re.compile(r"^triton_(poi|red|per|tem|for|spl|unk)_")

# Library kernels with C linkage: plain names, which a candidate could also give its own kernel.
PLAIN_LIBRARY_KERNELS = [
    # cuBLAS/cuBLASLt's generated GEMMs: nvjet (Hopper, Blackwell), xmma (Volta..Hopper; cuDNN's implicit
    # GEMMs too), and the architecture-prefixed SIMT/tensor-core ones (ampere_sgemm_128x64_nn).
    (re.compile(r"^(nvjet_|sm\d+_xmma_|xmma_|(maxwell|pascal|volta|turing|ampere|hopper|blackwell)_\w*gemm)"), "cuBLAS"),
    (re.compile(r"^cutlass"), "CUTLASS"),  # cutlass_80_tensorop_s1688gemm_* inside cuBLAS
    (re.compile(r"^cudnn"), "cuDNN"),  # cuDNN's runtime-fused kernels
    (INDUCTOR_KERNEL_NAME, "torch.compile (Inductor)"),
]
# Library kernels with C++ names. Matched in C++ names only: "flash_fwd" is a fair name for a Triton
# kernel. For backend=triton every C++ kernel is rejected anyway; this table names its library, and is
# all that applies to backend=cuda, whose candidates write C++ kernels of their own.
CPP_LIBRARY_KERNELS = [
    (re.compile(r"at6native|at4cuda|at::native|at::cuda"), "torch (ATen)"),
    (re.compile(r"3cub|cub::|6thrust|thrust::"), "torch (ATen)"),  # CUB/Thrust: ATen's sort, scan, nonzero, topk
    (re.compile(r"pytorch_flash|fmha_"), "fused attention"),  # before CUTLASS, which they are built on
    (re.compile(r"cublas|gemv2[NT]_kernel|gemvNSP_kernel|gemmSN_\w*kernel|gemmk1_kernel|splitKreduce_kernel"), "cuBLAS"),
    (re.compile(r"cutlass"), "CUTLASS"),
    (re.compile(r"cudnn|convolve_sgemm"), "cuDNN"),
]
OTHER_CPP = "non-Triton C++"

# What an allowed torch op may launch on the device: its library, and ATen's own kernels around it
# (a convolution's or a linear's bias add, layout copies), which can be any C++ kernel of torch's.
_WITH_ATEN = {"torch (ATen)", OTHER_CPP}
_GEMM = _WITH_ATEN | {"cuBLAS", "CUTLASS"}
OP_KERNELS = {
    **{op: _GEMM for op in ("mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "mv", "addmv", "dot",
                            "einsum", "tensordot", "_scaled_mm")},
    **{op: _GEMM | {"cuDNN"} for op in ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                         "conv_transpose2d", "conv_transpose3d", "cudnn_convolution")},
    **{op: _GEMM | {"cuDNN", "fused attention"} for op in (
        "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")},
}
# cuda.h's CUgraphNodeType, and the types a graph may hold besides kernels that compute nothing. A host
# node runs host code inside the replay; a conditional node's body graphs are not listed here.
NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
              7: "event_record", 8: "semaphore_signal", 9: "semaphore_wait", 10: "mem_alloc", 11: "mem_free",
              12: "batch_mem_op", 13: "conditional"}
INERT_NODES = {"memcpy", "memset", "empty", "wait_event", "event_record", "semaphore_signal", "semaphore_wait",
               "mem_alloc", "mem_free", "batch_mem_op"}


def kernel_class(name: str, backend: str = "triton") -> str | None:
    """The library a kernel belongs to, or None when it counts as the candidate's own."""
    if MEMORY_ONLY.search(name):
        return None
    cpp = bool(CPP_NAME.search(name))
    for pattern, cls in PLAIN_LIBRARY_KERNELS + (CPP_LIBRARY_KERNELS if cpp else []):
        if pattern.search(name):
            return cls
    return OTHER_CPP if cpp and backend == "triton" else None


def allowed_classes(allowed_ops) -> set[str]:
    """Kernel classes the problem's allowed torch ops (e.g. 'aten.convolution') let the device run."""
    out: set[str] = set()
    for op in allowed_ops:
        base = op.removeprefix("aten.").split(".")[0]
        out |= OP_KERNELS.get(base, _WITH_ATEN)
    return out


def kernel_violation(kernels, allowed_ops, *, nodes: dict | None = None, backend: str = "triton") -> str | None:
    """One line naming the first kernel (or graph node) that is not the candidate's and that the problem
    does not allow, or None. `kernels`: names (or a name -> count mapping); `nodes`: graph node-type counts."""
    nodes = nodes or {}
    if nodes.get("host"):
        return "the timed graph holds a host callback: host code would run between the timing events"
    if odd := sorted(t for t, n in nodes.items() if n and t not in INERT_NODES | {"kernel", "graph"}):
        return f"the timed graph holds {odd[0]} nodes, whose work cannot be attributed to a kernel"
    allowed = allowed_classes(allowed_ops)
    for name in kernels:
        cls = kernel_class(name, backend)
        if cls is not None and cls not in allowed:
            short = name if len(name) <= 80 else name[:77] + "..."
            return f"the device ran a {cls} kernel ({short}) that the problem does not allow"
    return None


def check_report(report) -> str:
    """'' if `report` (from an untrusted worker) has the shape `device_report` gives, else what is wrong."""
    if not isinstance(report, dict) or report.get("source") not in ("graph", "profiler"):
        return "no device kernel report (a dict with source 'graph' or 'profiler')"
    if "error" in report:
        return "" if isinstance(report["error"], str) else "a non-text error"
    for key in ("kernels", "nodes"):
        counts = report.get(key)
        if not isinstance(counts, dict) or not all(isinstance(k, str) and type(v) is int and v > 0
                                                   for k, v in counts.items()):
            return f"{key} that are not a name -> count mapping"
    return ""


def device_report(source: str, enumerate_) -> dict:
    """{'source', 'kernels': name -> count, 'nodes': type -> count} from `enumerate_()`, which returns
    (kernel names, node counts); {'source', 'error'} if the enumeration itself failed (old driver, ROCm)."""
    try:
        names, nodes = enumerate_()
    except Exception as e:  # noqa: BLE001 - reported, and judged by the harness
        return {"source": source, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    return {"source": source, "kernels": dict(Counter(n[:1000] for n in names)), "nodes": dict(nodes)}


# --- enumeration (on the device) -------------------------------------------------------------------

class DeviceKernelsError(RuntimeError):
    pass


class KernelNodeParams(Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA >= 12.0); public so a CPU test can check its layout against cuda.h."""

    _fields_ = [("func", c_void_p), ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
                ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
                ("kernelParams", c_void_p), ("extra", c_void_p), ("kern", c_void_p), ("ctx", c_void_p)]


_driver = None


def _cuda(fn: str, *args) -> None:
    """Calls a CUDA driver function; a CUresult other than CUDA_SUCCESS raises, naming the call."""
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")  # already loaded by torch; allowed by the worker's audit hook
    result = getattr(_driver, fn)(*args)
    if result != 0:
        text = c_char_p()
        _driver.cuGetErrorName(c_int(result), byref(text))
        raise DeviceKernelsError(f"{fn} returned {result} ({(text.value or b'?').decode()})")


def graph_kernels(raw_graph: int) -> tuple[list[str], Counter]:
    """Kernel names (one per kernel node, child graphs included) and node-type counts of a cudaGraph_t,
    e.g. `torch.cuda.CUDAGraph(keep_graph=True).raw_cuda_graph()` after capture."""
    names: list[str] = []
    nodes: Counter = Counter()
    pending = [c_void_p(raw_graph)]
    while pending:
        graph = pending.pop()
        count = c_size_t(0)
        _cuda("cuGraphGetNodes", graph, None, byref(count))
        if not count.value:
            continue
        handles = (c_void_p * count.value)()
        _cuda("cuGraphGetNodes", graph, handles, byref(count))
        for node in handles[:count.value]:
            kind = c_int(-1)
            _cuda("cuGraphNodeGetType", c_void_p(node), byref(kind))
            type_name = NODE_TYPES.get(kind.value, f"type{kind.value}")
            nodes[type_name] += 1
            if type_name == "kernel":
                names.append(_kernel_name(c_void_p(node)))
            elif type_name == "graph":
                child = c_void_p()
                _cuda("cuGraphChildGraphNodeGetGraph", c_void_p(node), byref(child))
                pending.append(child)
    return names, nodes


def _kernel_name(node: c_void_p) -> str:
    params = KernelNodeParams()
    _cuda("cuGraphKernelNodeGetParams_v2", node, byref(params))
    name = c_char_p()
    if params.func:
        _cuda("cuFuncGetName", byref(name), c_void_p(params.func))
    elif params.kern:  # a library-managed kernel (cuLibrary*), not yet bound to this context
        _cuda("cuKernelGetName", byref(name), c_void_p(params.kern))
    else:
        raise DeviceKernelsError("a kernel node with neither a CUfunction nor a CUkernel")
    if not name.value:
        raise DeviceKernelsError("a kernel node whose function has no name")
    return name.value.decode(errors="replace")


def profiled_kernels(call) -> tuple[list[str], Counter]:
    """Device kernels (all streams) that the profiler recorded while `call()` ran, for a model that could
    not be captured. The trace's 'kernel' category is what Kineto files CUPTI kernel records under."""
    import json
    import os
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")  # in the job folder (TMPDIR)
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    names = [e["name"] for e in events if str(e.get("cat", "")).lower() == "kernel" and "name" in e]
    if not names:  # every correct call launches something: an empty trace means the profiler saw nothing
        raise DeviceKernelsError("the profiler recorded no kernel")
    return names, Counter(kernel=len(names))
