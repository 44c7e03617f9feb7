"""Triton's cache, one private folder per candidate over shared folders that candidates only read.

A candidate writes compiled kernels into its own job folder, which is deleted with it, so it can
never change what the next candidate loads. The first shared folder is written only by the trusted
judge (which runs no candidate code): at start it compiles one kernel, which builds Triton's driver
helpers and a launcher, the compile work every candidate would otherwise repeat. The second holds
launchers the harness builds (kbencheval/eval/sharing/launchers.py). A candidate's own
artifacts are never promoted: nothing outside the candidate could check that a binary belongs to
its cache key without compiling the candidate's code again.

Select it with TRITON_CACHE_MANAGER=kbencheval.eval.processes.sandbox.tritoncache:LayeredCacheManager and
KBENCH_TRITON_SHARED_CACHE=<shared folders, os.pathsep between>; TRITON_CACHE_DIR is the private folder.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.runtime.cache import FileCacheManager

SHARED_ENV = "KBENCH_TRITON_SHARED_CACHE"
MANAGER = "kbencheval.eval.processes.sandbox.tritoncache:LayeredCacheManager"


class LayeredCacheManager(FileCacheManager):
    """Reads the private folder first, then the shared ones in order; writes only the private one."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override=override, dump=dump)
        shared = [] if override or dump else [d for d in os.environ.get(SHARED_ENV, "").split(os.pathsep) if d]
        self.shared_dirs = [os.path.join(d, key) for d in shared]

    def get_file(self, filename):
        found = super().get_file(filename)
        if found is None:
            return next((p for d in self.shared_dirs if os.path.exists(p := os.path.join(d, filename))), None)
        return found

    def get_group(self, filename):
        group = super().get_group(filename)
        for folder in self.shared_dirs if group is None else []:
            if os.path.exists(os.path.join(folder, f"__grp__{filename}")):
                shared = FileCacheManager.__new__(FileCacheManager)
                shared.cache_dir, shared.key, shared.lock_path = folder, self.key, None
                return FileCacheManager.get_group(shared, filename)
        return group


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def warm(device: str) -> None:
    """Compile and run one small kernel, so the shared cache holds Triton's helpers and a launcher."""
    import torch

    x = torch.ones(1024, device=device)
    y = torch.empty_like(x)
    _copy[(1,)](x, y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize(device)


def compile_only(arch: int, folder: str) -> None:
    """Compiles `_copy` for an NVIDIA GPU of compute capability `arch` (e.g. 90) into `folder`, without
    CUDA: nothing here touches the driver, so a process that did this can still fork children that
    initialise CUDA. Triton's first compile in a process costs most of a second beyond the kernel's own
    (its compiler's imports, LLVM's setup, ptxas's version); forked children inherit all of it."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    before = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = folder  # a cache of its own: a hit would skip the compile
    try:
        source = ASTSource(_copy, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                           constexprs={"BLOCK": 1024})
        triton.compile(source, target=GPUTarget("cuda", arch, 32))
    finally:
        if before is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = before
