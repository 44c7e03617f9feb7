"""In-process run-time checks of the candidate worker. They are tripwires, not guarantees.

Everything here lives in the candidate's own process, so a candidate that reaches a frame, a global
or a thread can switch it off. They catch the ordinary cases early and cheaply (torch compute in
`forward`, decoy launches, side streams, monkeypatching, flag changes, input mutation); the verdict's
promises rest on what the judge and the harness check from outside (docs/evaluator.md).
"""

from __future__ import annotations

import os

import torch

from kbencheval.eval.contract.inputs import global_flags, inputs_fingerprint
from kbencheval.eval.contract.transfer import storage_range
from kbencheval.eval.untrusted.recorders import ALWAYS_ALLOWED, LaunchTracker, OpCapture  # noqa: F401  (recorders.py)


def os_thread_count() -> int:
    """Threads as the kernel sees them: native threads included, which `threading` does not list."""
    return len(os.listdir("/proc/self/task"))


_pools_started_in: int | None = None  # the process that ran start_thread_pools (pools do not survive a fork)


def start_thread_pools() -> None:
    """Torch (OpenMP) and numpy (BLAS, used by the Triton interpreter) start their pools at the first
    parallel op: start them before the baseline count, so an honest candidate does not look as if it
    started threads. Once per process: the ops cost tens of milliseconds each time."""
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
    as sets was the largest step of an honest trial (benchmarks/probes/trial_step_profile.py); one
    listing of every operator is several times cheaper. The listing follows the operator table's order,
    which changes only when an operator is added or removed: equal lists mean none was, and only unequal
    ones are compared as sets."""

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
