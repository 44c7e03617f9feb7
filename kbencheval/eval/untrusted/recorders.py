"""What the candidate ran, recorded in its own process: the ATen ops of its `forward` (OpCapture) and its
kernel launches (LaunchTracker: Triton, torch.utils.cpp_extension modules, side streams). Tripwires
(tripwires.py) read these records; like them, they can be switched off by a candidate that controls its
process, and no verdict rests on them alone."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kbencheval.eval.contract.inputs import as_tensor_list
from kbencheval.eval.contract.transfer import storage_range

# Ops a kernel wrapper may call: allocation, views, copies and metadata. Everything else is compute.
ALLOCATION_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_",
    "arange", "scalar_tensor",
}
VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "permute", "transpose", "t", "expand", "squeeze",
    "unsqueeze", "flatten", "unflatten", "as_strided", "slice", "select", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "alias", "detach", "view_as", "expand_as", "movedim", "diagonal", "unfold",
    "lift_fresh", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous",
    "dim", "size", "stride", "numel",
}
COPY_OPS = {"clone", "copy_", "_to_copy", "contiguous", "to"}
ALWAYS_ALLOWED = {f"aten.{name}" for name in ALLOCATION_OPS | VIEW_OPS | COPY_OPS}


class OpCapture(TorchDispatchMode):
    """Records every aten op `forward` dispatches, and which storages copies were made from."""

    def __init__(self, allowed: set[str]):
        super().__init__()
        self.allowed = ALWAYS_ALLOWED | {op if op.startswith("aten.") else f"aten.{op}" for op in allowed}
        self.forbidden: list[str] = []
        self.copies: list[tuple[tuple[int, int], tuple[int, int]]] = []  # (source range, dest range)
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        name = str(func.overloadpacket)
        if not name.startswith("aten."):
            name = f"aten.{name}"
        if name not in self.allowed:
            self.forbidden.append(name)
        elif name.removeprefix("aten.") in COPY_OPS:
            self._record_copy(name, args, out)
        return out

    def _record_copy(self, name, args, out):
        src = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if name == "aten.copy_" and len(args) > 1:
            src, dst = args[1], args[0]
        else:
            dst = out if isinstance(out, torch.Tensor) else None
        if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor):
            if src.device != dst.device:
                self.forbidden.append(f"{name} ({src.device}->{dst.device}: host round trips are not allowed)")
            else:
                self.copies.append((storage_range(src), storage_range(dst)))


class LaunchTracker:
    """Wraps Triton's launch path (compiled and interpreted) to see every kernel launch and its tensors.

    Recording pauses while Triton itself runs a launch (its interpreter dispatches aten ops). No
    candidate callable may run inside that window: a callable grid is evaluated with recording on,
    and a kernel with pre-run hooks is a violation.
    """

    def __init__(self):
        self.active = False
        self.capture: OpCapture | None = None
        self.launches = 0
        self.tensor_ranges: list[tuple[int, int]] = []
        self.stream_violations = 0
        self.hook_violations = 0
        self.expected_stream = None

    def reset(self, capture: OpCapture | None):
        self.capture, self.launches, self.tensor_ranges = capture, 0, []
        self.stream_violations = self.hook_violations = 0

    def install(self):
        from triton.runtime.jit import JITFunction

        classes = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in classes:
            cls.run = self._wrap(cls.run)
        # The cuda backend: functions of load_inline modules are launches too. Wrapped when something
        # imports cpp_extension, not before: importing it was a large part of every worker's start, and
        # most candidates never use it.
        when_imported(CPP_EXTENSION, self._wrap_load_inline)

    def _wrap_load_inline(self, cpp_ext) -> None:
        original_load_inline = cpp_ext.load_inline

        def load_inline(*args, **kwargs):
            return TrackedExtension(original_load_inline(*args, **kwargs), self)

        cpp_ext.load_inline = load_inline

    def record(self, args):
        self.launches += 1
        for a in args:
            if isinstance(a, torch.Tensor):
                self.tensor_ranges.append(storage_range(a))
        if self.expected_stream is not None and torch.cuda.current_stream() != self.expected_stream:
            self.stream_violations += 1

    def paused(self, fn, *args, **kwargs):
        """Run Triton's own launch machinery with recording off."""
        if self.capture is not None:
            self.capture.paused += 1
        try:
            return fn(*args, **kwargs)
        finally:
            if self.capture is not None:
                self.capture.paused -= 1

    def _recording_grid(self, grid):
        """A callable grid is candidate code: run it with recording on, inside the paused launch."""
        if not callable(grid):
            return grid

        def grid_with_recording(meta):
            capture, depth = self.capture, self.capture.paused if self.capture else 0
            if capture is not None:
                capture.paused = 0
            try:
                return grid(meta)
            finally:
                if capture is not None:
                    capture.paused = depth

        return grid_with_recording

    def _wrap(self, run):
        tracker = self

        def tracked_run(fn, *args, grid, warmup, **kwargs):
            if warmup or not tracker.active:
                return run(fn, *args, grid=grid, warmup=warmup, **kwargs)
            tracker.record(list(args) + list(kwargs.values()))
            if getattr(fn, "pre_run_hooks", None):
                tracker.hook_violations += 1
                raise RuntimeError("kernels with pre-run hooks are not allowed")
            return tracker.paused(run, fn, *args, grid=tracker._recording_grid(grid), warmup=warmup, **kwargs)

        tracked_run.__wrapped__ = run
        return tracked_run


CPP_EXTENSION = "torch.utils.cpp_extension"


def when_imported(name: str, patch) -> None:
    """Calls `patch(module)` once module `name` is imported: now if it is, else right after its import
    runs (a finder ahead of the others that wraps the real loader)."""
    if name in sys.modules:
        patch(sys.modules[name])
        return

    class PatchOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                patch(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, PatchOnImport())


class TrackedExtension:
    def __init__(self, module, tracker: LaunchTracker):
        self._module, self._tracker = module, tracker

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn
        tracker = self._tracker

        def call(*args, **kwargs):
            if not tracker.active:
                return fn(*args, **kwargs)
            tracker.record(list(args) + list(kwargs.values()))
            out = tracker.paused(fn, *args, **kwargs)
            for t in as_tensor_list(out):
                if isinstance(t, torch.Tensor):
                    tracker.tensor_ranges.append(storage_range(t))
            return out

        return call
