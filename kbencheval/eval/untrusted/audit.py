"""A PEP 578 audit hook for the candidate worker: denies what a kernel never needs. A tripwire.

Installed before the candidate is imported; an audit hook cannot be removed, but it lives in the
candidate's process, and CPython raises no event for most of what matters (attribute access to a
frame, writes through an already open socket or file descriptor, memory pokes through an existing
ctypes handle). So the verdict never rests on it; it turns the plain routes (open a file for
writing, a socket, a subprocess, a signal, a new native library, a trace function, gc/frame
introspection) into an immediate `rejected`. Every denial is recorded, so a candidate that swallows
the PermissionError is still rejected after the call.
"""

from __future__ import annotations

import os
import sys

# Programs Triton (ptxas, the launcher's C compiler, ldconfig), load_inline (ninja, c++, nvcc) and
# platform.architecture() (file, which Triton's first compile calls) run.
TOOLCHAIN = {"file", "ptxas", "ptxas-blackwell", "cc", "gcc", "g++", "c++", "clang", "clang++", "ninja", "nvcc", "ldconfig",
             "which", "cuobjdump", "nvdisasm", "hipcc", "ld", "ld.lld", "lld"}
# Native libraries a GPU runtime loads by name (Triton's driver looks these up with ctypes).
RUNTIME_LIBRARIES = ("libcuda", "libnvrtc", "libcudart", "libnvJitLink", "libamdhip64", "libhsa-runtime64")
DENIED_EVENTS = {
    "socket.__new__": "opening a socket", "socket.connect": "connecting a socket", "socket.bind": "binding a socket",
    "os.system": "running a shell command", "os.fork": "forking", "os.forkpty": "forking", "os.kill": "sending a signal",
    "os.killpg": "sending a signal", "signal.pthread_kill": "sending a signal", "sys.settrace": "setting a trace function",
    "sys.setprofile": "setting a profile function", "sys._current_frames": "reading other threads' frames",
    "gc.get_objects": "walking the garbage collector", "gc.get_referrers": "walking the garbage collector",
    "gc.get_referents": "walking the garbage collector",
    "os.exec": "replacing the process", "os.posix_spawn": "starting a process", "os.spawn": "starting a process",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class AuditPolicy:
    def __init__(self, writable: list[str], library_dirs: list[str], candidate_file: str):
        self.writable = [os.path.realpath(d) + os.sep for d in writable if d]
        self.library_dirs = [os.path.realpath(d) + os.sep for d in library_dirs if d]
        self.candidate_file = candidate_file
        self.denied: list[str] = []
        self.busy = False

    def install(self) -> None:
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple) -> None:
        if self.busy:  # our own sys._getframe below raises an event too
            return
        reason = self.check(event, args)
        if reason:
            self.denied.append(reason)
            raise PermissionError(f"kbench worker: {reason} is not allowed")

    def check(self, event: str, args: tuple) -> str | None:
        if event == "_thread.start_new_thread":  # torch.compile's own workers may start threads
            return "starting a thread" if self.candidate_on_stack() else None
        if event in ("os.posix_spawn", "os.exec", "os.spawn"):  # subprocess may spawn the toolchain this way
            return None if os.path.basename(os.fsdecode(args[0])) in TOOLCHAIN else DENIED_EVENTS[event]
        if event in DENIED_EVENTS:
            return DENIED_EVENTS[event]
        if event == "open":
            return self.check_open(*args[:3])
        if event == "subprocess.Popen":
            argv = args[1].split() if isinstance(args[1], (str, bytes)) else list(args[1] or [])
            program = os.path.basename(str(args[0] or (argv[0] if argv else "")))
            return None if program in TOOLCHAIN else f"running {program!r}"
        if event == "ctypes.dlopen":
            return self.check_library(args[0])
        # Only the candidate's imports: the worker itself imports its own modules lazily (timing on GPUs).
        if event == "import" and str(args[0]).split(".")[0] == "kbencheval" and self.candidate_on_stack():
            return "importing the evaluator"
        if event in ("sys._getframe", "object.__setattr__") and self.called_from_candidate():
            return "reading frames" if event == "sys._getframe" else f"patching class {getattr(args[0], '__name__', '?')}"
        return None

    def check_open(self, path, mode, flags) -> str | None:
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and mode is None and flags & _WRITE_FLAGS)
        if not writing or isinstance(path, int):
            return None
        real = os.path.realpath(os.fsdecode(path))
        if real == os.devnull or any((real + os.sep).startswith(d) for d in self.writable):
            return None
        return f"writing {real}"

    def check_library(self, name) -> str | None:
        if name is None:
            return "loading the process's own symbols (ctypes.CDLL(None))"
        text = os.fsdecode(name)
        if "/" not in text and text.startswith(RUNTIME_LIBRARIES):
            return None
        real = os.path.realpath(text)
        if any(real.startswith(d) for d in self.library_dirs):
            return None
        return f"loading native library {text}"

    def called_from_candidate(self) -> bool:
        """Is the code that raised the event the candidate's own (two frames above this hook)?"""
        self.busy = True
        try:
            frame = sys._getframe(3)
            return frame is not None and frame.f_code.co_filename == self.candidate_file
        finally:
            self.busy = False


    def candidate_on_stack(self) -> bool:
        self.busy = True
        try:
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_code.co_filename == self.candidate_file:
                    return True
                frame = frame.f_back
            return False
        finally:
            self.busy = False


def deny_candidate_threads(policy: AuditPolicy) -> None:
    """Python < 3.12 raises no audit event for a new thread: wrap the thread starters instead, so that a
    helper thread joined before `forward` returns (invisible to any thread count) is still seen."""
    import _thread
    import threading

    for owner, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                        (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        original = getattr(owner, name, None)
        if original is None:
            continue

        def guarded(*args, __original=original, **kwargs):
            if policy.candidate_on_stack():
                policy.denied.append("starting a thread")
                raise PermissionError("kbench worker: starting a thread is not allowed")
            return __original(*args, **kwargs)

        setattr(owner, name, guarded)


def install_for_worker(job_dir: str, candidate_file: str) -> AuditPolicy:
    """Writes only under the job folder and the compile caches; native libraries only from those and the
    installed packages (torch, triton and their own libraries)."""
    import tempfile

    os.environ["TMPDIR"] = job_dir  # Triton writes its ptx/cubin temporaries there
    tempfile.tempdir = None
    caches = [os.environ.get("TRITON_CACHE_DIR", ""), os.environ.get("TORCH_EXTENSIONS_DIR", "")]
    prefixes = [sys.prefix, sys.base_prefix, *(p for p in sys.path if "site-packages" in p)]
    shared = os.environ.get("KBENCH_TRITON_SHARED_CACHE", "")  # read-only, built by the judge (sandbox/tritoncache.py)
    policy = AuditPolicy(writable=[job_dir, *caches], library_dirs=[job_dir, *caches, shared, *prefixes],
                         candidate_file=candidate_file)
    policy.install()
    deny_candidate_threads(policy)
    return policy
