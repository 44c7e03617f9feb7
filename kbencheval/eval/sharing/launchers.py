"""Triton launchers built by the harness, so that candidates load them instead of building their own.

A Triton kernel's first launch in a process builds its launcher: C that Triton generates from the
kernel's argument types and compiles with the system compiler. That took tenths of a second of
each candidate's precompile (`checks["precompile"]["loading_s"]`), every time, because each candidate
has a fresh private cache. The C depends only on the argument types (a pointer is a pointer whatever
it points to), so most kernels of a run share a handful of launchers.

A candidate's own build is never shared: its process belongs to the attacker. Instead the worker
reports the argument types of the kernels its precompile loaded (untrusted data), the harness checks
them against Triton's list of types, generates the C with Triton's own generator and builds it in a
background thread into a folder of this process that workers only read (a layer of
sandbox/tritoncache.LayeredCacheManager). A later candidate whose kernel takes the same types finds it
under the key Triton computes from the generated C, the same key; any other candidate misses and
builds its own, as before. The folder is fresh per process (no earlier run's files) and outside /tmp,
which the workers' private /tmp would hide; it is offered only to workers that cannot write it
(forkserver.job_env).
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import hashlib
import os
import re
import sys
import tempfile
import threading

from kbencheval.eval.sharing.background import EXITING, SerialBackground, process_folder

# Scalars as Triton names them for the NVIDIA launcher (driver.ty_to_cpp); a pointer's pointee never
# reaches the C, but is still held to a short name.
_SCALAR = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "f32", "fp64",
           "constexpr"}
_POINTER = re.compile(r"\*k?[a-z][a-z0-9]{0,11}")
MAX_ARGS = 64
MAX_LAUNCHERS = 4096  # per process; a run meets a few dozen
LAUNCHER = "__triton_launcher"


def checked_types(reported) -> tuple[str, ...] | None:
    """A worker's report of one kernel's argument types, if every entry is a type Triton's launcher knows."""
    if not isinstance(reported, list) or not 0 < len(reported) <= MAX_ARGS:
        return None
    if all(isinstance(t, str) and (t in _SCALAR or _POINTER.fullmatch(t)) for t in reported):
        return tuple(reported)
    return None


def launcher_source(types: tuple[str, ...]) -> tuple[str, str]:
    """Triton's C for a kernel taking `types`, and the cache folder Triton's build looks in for it."""
    from triton.backends.nvidia.driver import make_launcher
    from triton.runtime.build import platform_key
    from triton.runtime.cache import _base32

    source = make_launcher({}, dict(enumerate(types)), None)
    return source, _base32(hashlib.sha256((source + platform_key()).encode("utf-8")).hexdigest())


class LauncherBuilder:
    """Builds launchers for checked argument types, one at a time, off every candidate's path."""

    def __init__(self, folder: str):
        self.folder = folder
        self.asked: set[tuple[str, ...]] = set()  # type lists asked for (done or in flight)
        self.built: set[str] = set()  # cache keys built: pointer types share one launcher
        self.failures = 0
        self._lock = threading.Lock()
        self._background = SerialBackground("launcher-build")

    def request(self, reports) -> list[cf.Future]:
        """Schedules a build for every new, checked entry of `reports` (a worker's list of type lists).
        Never raises, and only checks and queues: it runs after a verdict, on the Evaluator's path."""
        futures = []
        for types in filter(None, map(checked_types, reports[:16] if isinstance(reports, list) else [])):
            with self._lock:
                if types in self.asked or len(self.asked) >= MAX_LAUNCHERS:
                    continue
                self.asked.add(types)
            futures.append(self._background.submit(self._build, types))
        return futures

    def drain(self, timeout_s: float = 120) -> None:
        """Returns once every build asked for so far is done (one thread: they run in order)."""
        self._background.drain(timeout_s)

    def finish(self, timeout_s: float = 30) -> None:
        """At exit, before the folder goes: queued builds are dropped, one in flight may end (its compiler
        would otherwise find its output folder gone and print the linker's error)."""
        EXITING.set()
        try:
            self.drain(timeout_s)
        except cf.TimeoutError:
            pass

    def _build(self, types: tuple[str, ...]) -> str | None:
        import sysconfig

        if EXITING.is_set():  # the folder is being removed: a build now would only print the linker's complaint
            return None
        try:
            from triton.backends.nvidia.driver import include_dirs, libraries, library_dirs
            from triton.runtime.build import _build

            source, key = launcher_source(types)
            target = os.path.join(self.folder, key, LAUNCHER + sysconfig.get_config_var("EXT_SUFFIX"))
            if key in self.built:  # the same C for other pointee types
                return target
            with tempfile.TemporaryDirectory(dir=self.folder) as work:
                c_file = os.path.join(work, LAUNCHER + ".c")
                with open(c_file, "w") as f:
                    f.write(source)
                built = _build(LAUNCHER, c_file, work, library_dirs(), include_dirs, libraries, [])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(built, target)  # whole, or not there: a worker never reads half a file
            self.built.add(key)
            return target
        except Exception as e:  # noqa: BLE001 - an optimisation: workers then build their own, as before
            self._failed(e)
            return None

    def _failed(self, e: Exception) -> None:
        self.failures += 1
        if self.failures == 1 and not EXITING.is_set():
            print(f"kbench: a Triton launcher could not be built for the workers ({type(e).__name__}: "
                  f"{str(e)[:200]}); they build their own", file=sys.stderr)


_shared: LauncherBuilder | None = None
_shared_lock = threading.Lock()


def shared_builder() -> LauncherBuilder | None:
    """This process's builder (every Evaluator in it shares one folder), or None where it cannot be:
    KBENCH_LAUNCHER_CACHE=0, no writable /var/tmp, or no Triton NVIDIA backend."""
    global _shared
    with _shared_lock:
        if _shared is None and os.environ.get("KBENCH_LAUNCHER_CACHE", "1") != "0":
            try:
                import triton.backends.nvidia.driver  # noqa: F401
            except ImportError:
                return None
            if (folder := process_folder("kbench-launchers-")) is not None:
                _shared = LauncherBuilder(folder)
                atexit.register(_shared.finish)  # runs before the folder's removal (atexit: last in, first out)
        return _shared


def counts() -> dict | None:
    """What this process's builder was asked to build and how many builds failed (for the benchmarks)."""
    return None if _shared is None else {"asked": len(_shared.asked), "built": len(_shared.built),
                                         "failed": _shared.failures}
