"""In-process run-time checks of the candidate worker. They are tripwires, not guarantees.

Everything here lives in the candidate's own process, so a candidate that reaches a frame, a global
or a thread can switch it off. They catch the ordinary cases early and cheaply (torch compute in
`forward`, decoy launches, side streams, monkeypatching, flag changes, input mutation); the verdict's
promises rest on what the judge and the harness check from outside (docs/evaluator.md).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kbencheval.eval.contract.inputs import as_tensor_list, global_flags, inputs_fingerprint
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


def os_thread_count() -> int:
    """Threads as the kernel sees them: native threads included, which `threading` does not list."""
    return len(os.listdir("/proc/self/task"))


_pools_started_in: int | None = None  # the process that ran start_thread_pools (pools do not survive a fork)


def start_thread_pools() -> None:
    """Torch (OpenMP) and numpy (BLAS, used by the Triton interpreter) start their pools at the first
    parallel op: start them before the baseline count, so an honest candidate does not look as if it
    started threads. Once per process: the ops cost 0.06-0.08 s each time on a 2-core CPU."""
    global _pools_started_in
    if _pools_started_in == os.getpid():
        return
    import numpy

    a = torch.ones(512, 512)
    (a @ a).add_(1).sum()
    torch.ones(1 << 20).copy_(torch.zeros(1 << 20))
    b = numpy.ones((512, 512), dtype=numpy.float32)
    (b @ b).sum()
    _pools_started_in = os.getpid()


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
        # imports cpp_extension, not before: importing it took 0.36 s of every worker's start on the
        # H100, and most candidates never use it.
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


def kernel_written(t: torch.Tensor, tracker: LaunchTracker, capture: OpCapture) -> bool:
    """Was this output's memory passed to a launched kernel, directly or through copies/views?"""
    touched = list(tracker.tensor_ranges)
    changed = True
    while changed:
        changed = False
        for src, dst in capture.copies:
            if dst not in touched and any(_overlaps(src, r) for r in touched):
                touched.append(dst)
                changed = True
    target = storage_range(t)
    return any(_overlaps(target, r) for r in touched)


def _overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] or (a == b)


def guarded_functions() -> dict:
    """Functions whose identity must not change while a candidate runs (monkeypatching detection)."""
    import time

    import triton
    from triton.runtime.jit import JITFunction

    return {
        "torch.allclose": torch.allclose, "torch.equal": torch.equal, "torch.manual_seed": torch.manual_seed,
        "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "time.perf_counter": time.perf_counter, "torch.nn.Module.__call__": torch.nn.Module.__call__,
        "torch.Tensor.__eq__": torch.Tensor.__eq__, "triton.jit": triton.jit,
        "torch.cuda.current_stream": torch.cuda.current_stream, "JITFunction.run": JITFunction.run,
    }


class DispatcherSnapshot:
    """The dispatcher's operators, and the full kernel table of each allowed op: a candidate that
    registers a kernel (torch.library) could run compute under an allowed op's name, or call an op of
    its own. A kernel added to an op that is not allowed needs no check here: calling that op is
    forbidden whatever runs under it (OpCapture).

    Checked after every trial, so it must be cheap. Comparing the registrations under nine dispatch keys
    as sets took 7.8 ms a check on the H100, the largest step of an honest trial there
    (benchmarks/trial_step_profile.py); on a 2-core CPU the whole check fell from 8.5 to 1.6 ms with
    one listing of every operator. The listing follows the operator table's order, which changes only
    when an operator is added or removed: equal lists mean none was, and only unequal ones are
    compared as sets."""

    def __init__(self, allowed: set[str]):
        self.allowed_names = [op.replace(".", "::", 1) for op in sorted(allowed)]
        self.names, self.tables = self.read()
        self.known = frozenset(self.names)

    def read(self) -> tuple[list, dict]:
        names = torch._C._dispatch_get_registrations_for_dispatch_key()  # no key: every operator
        tables = {}
        for name in self.allowed_names:
            try:
                tables[name] = torch._C._dispatch_dump(name)
            except RuntimeError:  # not a dispatcher op (e.g. aten.dim)
                pass
        return names, tables

    def changes(self) -> list[str]:
        """Allowed ops whose kernel table changed, then operators added since the snapshot."""
        names, tables = self.read()
        changed = [name for name, table in tables.items() if self.tables.get(name) != table]
        return changed + ([] if names == self.names else sorted(set(names) - self.known))


class Tripwires:
    """The state every check compares against, taken before the candidate was imported."""

    def __init__(self, tracker: LaunchTracker, flags: dict, allowed_ops: set[str]):
        self.tracker, self.flags = tracker, flags
        self.allowed_ops = ALWAYS_ALLOWED | {op if op.startswith("aten.") else f"aten.{op}" for op in allowed_ops}
        self.guarded = guarded_functions()
        start_thread_pools()
        self.threads = os_thread_count()
        self.dispatcher = DispatcherSnapshot(self.allowed_ops)
        self.audit = None  # kbencheval.eval.untrusted.audit.AuditPolicy, once installed

    def process_violation(self) -> str | None:
        """Checks of process-wide state: audit denials, monkeypatching, flags, threads, dispatcher registrations."""
        if self.tracker.hook_violations:
            return "a kernel has pre-run hooks (candidate code inside the launch)"
        if self.audit is not None and self.audit.denied:
            return f"the candidate tried {self.audit.denied[0]} (denied by the worker's audit hook)"
        after = guarded_functions()
        if tampered := [name for name, fn in self.guarded.items() if after.get(name) is not fn]:
            return f"the candidate replaced {', '.join(tampered)} (monkeypatching)"
        if (now := global_flags()) != self.flags:
            changed = [k for k, v in now.items() if self.flags[k] != v]
            return f"the candidate changed torch global flags: {', '.join(changed)}"
        if os_thread_count() > self.threads:
            return "the candidate started threads"
        if new := self.dispatcher.changes():
            return f"the candidate registered dispatcher kernels ({', '.join(new[:4])}): ops must not be rerouted"
        return None

    def call_violation(self, capture: OpCapture, outs: list, before_inputs: list, inputs: list) -> str | None:
        """Checks of one forward call, after it returned."""
        tracker = self.tracker
        if capture.forbidden:
            ops = sorted(set(capture.forbidden))
            return f"forward calls torch compute ops {', '.join(ops[:6])}: the work must happen in custom kernels"
        if tracker.stream_violations:
            return "a kernel was launched on a side stream"
        if tracker.launches == 0:
            return "forward launched no custom kernel"
        for i, t in enumerate(outs):  # plain tensors (transfer.plain_outputs)
            if not kernel_written(t, tracker, capture):
                return f"output {i} was not written by any launched kernel (decoy launch)"
        for i, (a, b) in enumerate(zip(before_inputs, inputs_fingerprint(inputs))):
            if a != b:  # `before_inputs`: the inputs' fingerprint before the call (inputs.inputs_fingerprint)
                return f"forward modified input {i} in place"
        return None


def poison(device: torch.device, nbytes_list: list[int]):
    """Fill soon-to-be-reused allocator blocks with NaN so stale memory can never pass as output."""
    blocks = [torch.full((max(n, 4) // 4,), float("nan"), dtype=torch.float32, device=device)
              for n in nbytes_list for _ in range(2)]
    del blocks
