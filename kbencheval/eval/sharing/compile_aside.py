"""Triton compiles outside the device gate: the worker side of the Compiling / Compiled / Resume exchange.

Untrusted side (runs in the candidate's worker, kbencheval/eval/untrusted/worker.py). The harness side is
session.Session.compile_aside.
"""

from __future__ import annotations

import contextlib
import time

import torch

from kbencheval.eval.contract.inputs import sync
from kbencheval.eval.contract.protocol import Channel, Compiled, Compiling, ProtocolError, Resume


class CompileAside:
    """Triton compiles a kernel at its first launch: seconds of CPU work inside a phase that holds the
    device gate, which a timer elsewhere would wait for. Around each compile the worker finishes its
    device work and tells the harness (Compiling, Compiled, then it waits for Resume: protocol.py), and
    the harness lets go of the gate meanwhile. Outside a phase (importing the candidate, before Ready)
    and while a CUDA graph is captured, a compile runs where it is."""

    def __init__(self, chan: Channel, device: torch.device):
        self.chan, self.device = chan, device
        self.in_phase = False
        self.compiling = False
        self.dry = False  # compiling_only: launches compile and run nothing
        self.count = 0  # compiles so far
        self.loading_s = 0.0  # of which, building launchers and loading modules (compiling_only)
        self.launcher_types: list[list[str]] = []  # argument types of the kernels loaded (launchers.py)

    def install(self) -> None:
        """Wraps the Triton JIT's compile step; a Triton without it keeps compiles inside the phase."""
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:
            return
        compile_kernel = getattr(JITFunction, "_do_compile", None)
        if compile_kernel is None:
            return
        aside = self

        def _do_compile(fn, *args, **kwargs):
            aside.count += 1
            with aside.window():
                return compile_kernel(fn, *args, **kwargs)

        JITFunction._do_compile = _do_compile
        launch = JITFunction.run

        def run(fn, *args, **kwargs):
            if not aside.dry:
                return launch(fn, *args, **kwargs)
            kwargs["warmup"] = True  # Triton's own compile-without-launch
            kernel = launch(fn, *args, **kwargs)
            aside.load(kernel)
            return kernel

        JITFunction.run = run
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:
            return
        tune = Autotuner.run

        def tune_or_compile(tuner, *args, **kwargs):
            """Dry, an autotuned kernel compiles every config it would time, and chooses none: timings of
            launches that ran nothing must not become its cached choice."""
            if not aside.dry:
                return tune(tuner, *args, **kwargs)
            tuner.nargs = dict(zip(tuner.arg_names, args))
            try:
                for config in tuner.prune_configs(kwargs) if len(tuner.configs) > 1 else tuner.configs:
                    tuner.fn.run(*args, **kwargs, **config.all_kwargs())
            finally:
                tuner.nargs = None

        Autotuner.run = tune_or_compile

    def load(self, kernel) -> None:
        """A compiled kernel's launcher (C that Triton builds with the system compiler, a fraction of a
        second per new signature) and its module on the device: otherwise both happen at its first launch,
        inside a trial. A kernel that cannot load (e.g. too much shared memory) raises there again."""
        types = list(getattr(getattr(kernel, "src", None), "signature", {}).values())
        descriptors = getattr(getattr(kernel, "metadata", None), "tensordesc_meta", None)
        if types not in self.launcher_types and not descriptors:
            self.launcher_types.append(types)  # for the harness to build once for later candidates
        clock = time.perf_counter()
        try:
            kernel._init_handles()
        except Exception:  # noqa: BLE001 - Triton keeps the error for the kernel's first launch
            pass
        self.loading_s += time.perf_counter() - clock

    @contextlib.contextmanager
    def compiling_only(self):
        self.dry = True
        try:
            yield
        finally:
            self.dry = False

    @contextlib.contextmanager
    def window(self):
        capturing = self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if not self.in_phase or self.compiling or capturing:
            yield
            return
        sync(self.device)  # what ran before the compile is done before the device is let go
        self.chan.send(Compiling())
        self.compiling = True
        try:
            yield
        finally:
            self.compiling = False
            self.chan.send(Compiled())
            if not isinstance(reply := self.chan.recv(), Resume):
                raise ProtocolError(f"expected resume after a compile, got {type(reply).__name__}")
