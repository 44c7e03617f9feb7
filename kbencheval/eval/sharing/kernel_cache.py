"""Triton kernels compiled by the harness from candidates' TTIR, so that a kernel met before is not
compiled again.

Each candidate compiles in a fresh private cache: its process belongs to the attacker, so nothing it
writes may reach another candidate. That cost every candidate of a warm pass its whole compile again
(up to seconds of its worker's readiness, on the critical path). The expensive half of a
Triton compile (TTGIR, LLVM, PTX, ptxas) depends only on the TTIR and the compile options, so:

- the worker's Triton runs its own frontend (Python to TTIR: candidate code, untrusted), then looks its
  TTIR up here (`KernelLookup`, a stage hook): the key is a hash of the TTIR without its source
  locations (they name each candidate's own file), the options that vary by kernel, the backend and
  Triton's cache-relevant environment. A hit returns the cached stages; a miss compiles as before and
  is reported (`checks["precompile"]["kernel_sources"]`, untrusted data);
- after the verdict, the harness checks the report (`checked_report`), strips the locations itself,
  computes the key itself, and compiles that TTIR in a child of a sandboxed fork server of its own
  (`KernelCompiler`; the child can write only its job folder), then moves the outputs into a folder
  that workers only read, under the key it computed.

So an entry is what this process's Triton makes of the TTIR its key names, whoever reported it: a
false report only costs a compile. The binaries lack line information (they are compiled without
locations). The folder is fresh per process and outside /tmp, offered only to workers that cannot write
it (forkserver.job_env); `KBENCH_KERNEL_CACHE=0` turns it off.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time

from kbencheval.eval.sharing.background import EXITING, SerialBackground, process_folder

FILES = ("ttgir", "llir", "ptx", "cubin")
MAX_TTIR_CHARS = 1 << 20
MAX_REPORTS = 8  # kernels reported per candidate
MAX_KERNELS = 4096  # compiled per process
MAX_OUTPUT_BYTES = 64 << 20
KEY_VERSION = 1
SWITCH = "KBENCH_KERNEL_CACHE"  # =0 in the harness's environment: off
FOLDER_ENV = "KBENCH_KERNELS_FOLDER"  # in a worker's: the folder it reads
# Options that vary by kernel (launch arguments, autotune configs); every other option must be Triton's
# default for these, or the kernel is neither looked up nor reported.
VARYING = {
    "num_warps": lambda v: type(v) is int and v in (1, 2, 4, 8, 16, 32),
    "num_ctas": lambda v: type(v) is int and v in (1, 2, 4, 8, 16),
    "num_stages": lambda v: type(v) is int and 0 <= v <= 16,
    "maxnreg": lambda v: v is None or (type(v) is int and 16 <= v <= 255),
    "enable_fp_fusion": lambda v: type(v) is bool,
    "launch_cooperative_grid": lambda v: type(v) is bool,
    "launch_pdl": lambda v: type(v) is bool,
    "debug": lambda v: type(v) is bool,
    "sanitize_overflow": lambda v: type(v) is bool,
    "default_dot_input_precision": lambda v: v in ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"),
}


_STRING_OR_LOC = re.compile(r'"| loc\(')


def strip_locations(text: str) -> str:
    """MLIR text without its location attributes (`loc(...)`, `#loc = ...` lines); string literals kept."""
    text = "\n".join(line for line in text.split("\n") if not line.startswith("#loc"))
    out, i, n = [], 0, len(text)

    def string_end(j: int) -> int:  # text[j] is an opening quote
        j += 1
        while j < n and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return j + 1

    while (m := _STRING_OR_LOC.search(text, i)) is not None:
        out.append(text[i:m.start()])  # plain text copied in runs, not a character at a time
        if m.group() == '"':
            i = string_end(m.start())
            out.append(text[m.start():i])
            continue
        depth, j = 0, m.start() + 4
        while j < n:
            if text[j] == '"':
                j = string_end(j)
                continue
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    out.append(text[i:])
    return "".join(out)


def kernel_key(ttir: str, options: dict, backend_hash: str) -> str:
    from triton import __version__
    from triton.compiler.compiler import get_cache_invalidating_env_vars

    parts = [KEY_VERSION, __version__, backend_hash, sorted(options.items()),
             sorted(get_cache_invalidating_env_vars().items()), ttir]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def checked_report(report) -> tuple[str, dict] | None:
    """One reported kernel ({"ttir": str, "options": {name: value}}), if it is well formed: its TTIR
    stripped of locations here, and options of VARYING's names and values only."""
    if not isinstance(report, dict) or not isinstance(report.get("ttir"), str):
        return None
    options = report.get("options")
    if len(report["ttir"]) > MAX_TTIR_CHARS or not isinstance(options, dict) or set(options) != set(VARYING):
        return None
    if not all(VARYING[name](value) for name, value in options.items()):
        return None
    return strip_locations(report["ttir"]), dict(options)


class KernelLookup:
    """In the worker: after its TTIR stage, each compile looks its key up in `folder`, written only by
    the harness. Installed before the job; the candidate can switch it off, which costs it a compile."""

    def __init__(self, folder: str):
        self.folder = folder
        self.hits = 0
        self.misses: list[dict] = []  # reports for the harness

    def install(self) -> None:
        from triton import knobs

        knobs.runtime.add_stages_inspection_hook = self.add_stages

    def varying(self, backend, options) -> dict | None:
        """The options' varying part, if every other option is what Triton makes of it by default."""
        varying = {name: getattr(options, name, None) for name in VARYING}
        try:
            return varying if backend.parse_options(dict(varying)).__dict__ == options.__dict__ else None
        except Exception:  # noqa: BLE001 - options this lookup does not know: compile as usual
            return None

    def add_stages(self, backend, stages, options, language, capability) -> None:
        if "ttir" not in stages or getattr(backend.target, "backend", "") != "cuda":
            return
        varying = self.varying(backend, options)
        if varying is None:
            return
        found: dict = {}
        make_ttir = stages["ttir"]

        def ttir_then_look_up(src, metadata):
            module = make_ttir(src, metadata)
            ttir = strip_locations(str(module))
            entry = self._read(kernel_key(ttir, varying, backend.hash()))
            if entry is not None:
                found.update(entry)
                self.hits += 1
            elif len(self.misses) < MAX_REPORTS and len(ttir) <= MAX_TTIR_CHARS:
                self.misses.append({"ttir": ttir, "options": varying})
            return module

        def cached(ext, compile_stage):
            def stage(src, metadata):
                if not found:
                    return compile_stage(src, metadata)
                if ext == FILES[0]:  # what the later stages would have recorded
                    metadata.update({k: v for k, v in found["metadata"].items() if k not in ("hash", "target")})
                return found[ext]
            return stage

        stages["ttir"] = ttir_then_look_up
        for ext in FILES:
            if ext in stages:
                stages[ext] = cached(ext, stages[ext])

    def _read(self, key: str) -> dict | None:
        entry = os.path.join(self.folder, key)
        try:
            found = {ext: _read_file(os.path.join(entry, f"kernel.{ext}"), ext == "cubin") for ext in FILES}
            with open(os.path.join(entry, "kernel.json")) as f:
                found["metadata"] = json.load(f)
            return found
        except (OSError, ValueError):
            return None


def _read_file(path: str, binary: bool):
    with open(path, "rb" if binary else "r") as f:
        return f.read()


def compile_job(job_dir: str, arch: int) -> None:
    """In the compile child (sandboxed, its job folder its only writable place): kernel.ttir and
    options.json in, kernel.{ttgir,llir,ptx,cubin,json} out."""
    import triton
    from triton.backends.compiler import GPUTarget

    with open(os.path.join(job_dir, "options.json")) as f:
        options = json.load(f)
    kernel = triton.compile(os.path.join(job_dir, "kernel.ttir"), target=GPUTarget("cuda", arch, 32), options=options)
    for ext in FILES:
        with open(os.path.join(job_dir, f"kernel.{ext}"), "wb" if ext == "cubin" else "w") as f:
            f.write(kernel.asm[ext])
    with open(os.path.join(job_dir, "kernel.json"), "w") as f:
        json.dump(kernel.metadata._asdict(), f, default=vars)


class KernelCompiler:
    """Compiles checked reports, one at a time, in children of its own sandboxed fork server."""

    def __init__(self, folder: str, start_server, arch: int, timeout_s: float = 120):
        self.folder, self.arch, self.timeout_s = folder, arch, timeout_s
        self._start_server, self._server = start_server, None  # started by the first compile, off every path
        self.asked: set[str] = set()
        self.compiled = self.failures = 0
        self.closed = False
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._background = SerialBackground("kernel-compile")

    def request(self, reports) -> list[cf.Future]:
        """Queues a worker's report; never raises. It runs after a verdict, on the Evaluator's path, so
        the checks (a pass over up to 8 MB of text) run in the compile thread."""
        entries = reports[:MAX_REPORTS] if isinstance(reports, list) else []
        return [self._background.submit(self._check_and_compile, entry) for entry in entries if isinstance(entry, dict)]

    def drain(self, timeout_s: float = 300) -> None:
        self._background.drain(timeout_s)

    def close(self) -> None:
        self.closed = True  # a compile in flight now fails with the server: not worth a message
        if self._server is not None:
            self._server.close()

    @functools.cached_property
    def _backend_hash(self) -> str:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        return make_backend(GPUTarget("cuda", self.arch, 32)).hash()

    def _check_and_compile(self, report: dict) -> str | None:
        """A new, well-formed report compiled; None for any other (malformed, asked before, over the cap)."""
        if (checked := checked_report(report)) is None:
            return None
        ttir, options = checked
        key = kernel_key(ttir, options, self._backend_hash)
        with self._lock:
            if key in self.asked or len(self.asked) >= MAX_KERNELS:
                return None
            self.asked.add(key)
        return self._compile(key, ttir, options)

    def _compile(self, key: str, ttir: str, options: dict) -> str | None:
        clock = time.perf_counter()
        try:
            if self._server is None:
                self._server = self._start_server()
            job_dir = tempfile.mkdtemp(prefix="compile-", dir=self._server.scratch)
            try:
                with open(os.path.join(job_dir, "kernel.ttir"), "w") as f:
                    f.write(ttir)
                with open(os.path.join(job_dir, "options.json"), "w") as f:
                    json.dump(options, f)
                self._server.run(job_dir, self.arch, self.timeout_s)
                return self._keep(key, job_dir)
            finally:
                shutil.rmtree(job_dir, ignore_errors=True)
        except Exception as e:  # noqa: BLE001 - an optimisation: workers compile their own, as before
            self._failed(e)
            return None
        finally:
            self.seconds += time.perf_counter() - clock

    def _keep(self, key: str, job_dir: str) -> str:
        """The child's outputs, checked for shape, moved whole under the key computed here."""
        names = [f"kernel.{ext}" for ext in (*FILES, "json")]
        staging = tempfile.mkdtemp(prefix=".staging-", dir=self.folder)
        try:
            for name in names:
                source = os.path.join(job_dir, name)
                if os.path.islink(source) or not os.path.isfile(source) or os.path.getsize(source) > MAX_OUTPUT_BYTES:
                    raise ValueError(f"the compile child left no usable {name}")
                shutil.copyfile(source, os.path.join(staging, name))
            with open(os.path.join(staging, "kernel.json")) as f:
                if not isinstance(json.load(f), dict):
                    raise ValueError("the compile child's metadata is not an object")
            target = os.path.join(self.folder, key)
            os.rename(staging, target)  # whole, or not there: a worker never reads half an entry
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.compiled += 1
        return target

    def _failed(self, e: Exception) -> None:
        self.failures += 1
        if self.failures == 1 and not (self.closed or EXITING.is_set()):
            print(f"kbench: a reported Triton kernel was not compiled for the workers ({type(e).__name__}: "
                  f"{str(e)[:200]}); they compile their own", file=sys.stderr)


_shared: KernelCompiler | None = None
_shared_lock = threading.Lock()


def shared_compiler(start_server, arch: int) -> KernelCompiler | None:
    """This process's compiler (every Evaluator in it shares one folder), or None: KBENCH_KERNEL_CACHE=0
    or no writable /var/tmp. `start_server()` returns an object with `scratch`, `run(job_dir, arch,
    timeout_s)` and `close()` (server.CompileServer)."""
    global _shared
    with _shared_lock:
        if _shared is None and os.environ.get(SWITCH, "1") != "0":
            if (folder := process_folder("kbench-kernels-")) is None:
                return None
            _shared = KernelCompiler(folder, start_server, arch)
            atexit.register(_shared.close)  # before the folder's removal (atexit runs last in first)
        return _shared


def counts() -> dict | None:
    """Kernels asked for, compiled, failed, and seconds spent (for the benchmarks)."""
    if _shared is None:
        return None
    return {"asked": len(_shared.asked), "compiled": _shared.compiled, "failed": _shared.failures,
            "seconds": round(_shared.seconds, 2)}
