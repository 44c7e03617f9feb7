"""What runs inside the sandboxed child processes: the candidate worker and the judge.

The candidate worker imports the untrusted `ModelNew`, runs it under run-time checks, times it
against the reference, and exports its *outputs*. It never sees a reference output and never
decides a verdict: the judge (a separate trusted process, forked from the same pre-warmed server)
computes reference outputs and compares. The harness only relays JSON between them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import threading
import time
import traceback
import types

import torch
import torch._dynamo  # noqa: F401  (its import rebinds torch.manual_seed; do it before guarding)
from torch.utils._python_dispatch import TorchDispatchMode

from kbencheval.eval.transfer import export_tensors, import_tensors

# --- messaging ---------------------------------------------------------------------------------


class Channel:
    """JSON lines over a connected socket."""

    def __init__(self, sock):
        self.sock = sock
        self.rfile = sock.makefile("r", encoding="utf-8")

    def send(self, **msg):
        self.sock.sendall((json.dumps(msg) + "\n").encode())

    def recv(self) -> dict:
        line = self.rfile.readline()
        if not line:
            raise EOFError("harness closed the channel")
        return json.loads(line)


# --- problem helpers (shared by worker and judge, so both build identical models and inputs) -----


def load_problem_module(source: str, sizes: dict) -> types.ModuleType:
    module = types.ModuleType("reference_problem")
    exec(compile(source, "<reference problem>", "exec"), module.__dict__)
    for name, value in sizes.items():
        setattr(module, name, value)
    return module


def as_tensor_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def make_inputs(module, seed: int, device: torch.device) -> list:
    torch.manual_seed(seed)
    random.seed(seed)
    with torch.device(device):
        inputs = module.get_inputs()
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def build_model(cls, module, seeds: dict, device: torch.device):
    torch.manual_seed(seeds["init"])
    with torch.device(device):
        init_inputs = module.get_init_inputs()
    torch.manual_seed(seeds["model"])
    with torch.device(device):
        model = cls(*init_inputs)
    return model.to(device)


def pin_global_flags() -> dict:
    """Fix the numerics-relevant torch flags; the worker checks after every call that they held."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")
    return global_flags()


def global_flags() -> dict:
    return {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "cudnn.deterministic": torch.backends.cudnn.deterministic,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "grad_enabled": torch.is_grad_enabled(),
    }


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- run-time checks -----------------------------------------------------------------------------

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


def _storage_range(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


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
            src = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if name == "aten.copy_" and len(args) > 1:
                src, dst = args[1], args[0]
            else:
                dst = out if isinstance(out, torch.Tensor) else None
            if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor):
                if src.device != dst.device:
                    self.forbidden.append(f"{name} ({src.device}->{dst.device}: host round trips are not allowed)")
                else:
                    self.copies.append((_storage_range(src), _storage_range(dst)))
        return out


class LaunchTracker:
    """Wraps Triton's launch path (compiled and interpreted) to see every kernel launch and its tensors."""

    def __init__(self):
        self.active = False
        self.capture: OpCapture | None = None
        self.launches = 0
        self.tensor_ranges: list[tuple[int, int]] = []
        self.stream_violations = 0
        self.expected_stream = None

    def reset(self, capture: OpCapture | None):
        self.capture, self.launches, self.tensor_ranges = capture, 0, []
        self.stream_violations = 0

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
        try:  # the cuda backend: functions of load_inline modules are launches too
            import torch.utils.cpp_extension as cpp_ext

            original_load_inline = cpp_ext.load_inline

            def load_inline(*args, **kwargs):
                module = original_load_inline(*args, **kwargs)
                return _TrackedExtension(module, self)

            cpp_ext.load_inline = load_inline
        except ImportError:
            pass

    def record(self, args):
        self.launches += 1
        for a in args:
            if isinstance(a, torch.Tensor):
                self.tensor_ranges.append(_storage_range(a))
        if self.expected_stream is not None and torch.cuda.current_stream() != self.expected_stream:
            self.stream_violations += 1

    def _wrap(self, run):
        tracker = self

        def tracked_run(fn, *args, grid, warmup, **kwargs):
            if warmup or not tracker.active:
                return run(fn, *args, grid=grid, warmup=warmup, **kwargs)
            tracker.record(list(args) + list(kwargs.values()))
            if tracker.capture is not None:
                tracker.capture.paused += 1
            try:
                return run(fn, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                if tracker.capture is not None:
                    tracker.capture.paused -= 1

        tracked_run.__wrapped__ = run
        return tracked_run


class _TrackedExtension:
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
            if tracker.capture is not None:
                tracker.capture.paused += 1
            try:
                out = fn(*args, **kwargs)
            finally:
                if tracker.capture is not None:
                    tracker.capture.paused -= 1
            for t in as_tensor_list(out):
                if isinstance(t, torch.Tensor):
                    tracker.tensor_ranges.append(_storage_range(t))
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
    target = _storage_range(t)
    return any(_overlaps(target, r) for r in touched)


def _overlaps(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] or (a == b)


def _guarded_functions() -> dict:
    """Functions whose identity must not change while a candidate runs (monkeypatching detection)."""
    import time

    import triton

    guarded = {
        "torch.allclose": torch.allclose, "torch.equal": torch.equal, "torch.manual_seed": torch.manual_seed,
        "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "time.perf_counter": time.perf_counter, "torch.nn.Module.__call__": torch.nn.Module.__call__,
        "torch.Tensor.__eq__": torch.Tensor.__eq__, "triton.jit": triton.jit,
        "torch.cuda.current_stream": torch.cuda.current_stream,
    }
    from triton.runtime.jit import JITFunction

    guarded["JITFunction.run"] = JITFunction.run
    return guarded


def _tampered(before: dict) -> list[str]:
    after = _guarded_functions()
    return [name for name, fn in before.items() if after.get(name) is not fn]


# --- error reporting ---------------------------------------------------------------------------


def short_error(exc: BaseException, candidate_file: str | None = None) -> str:
    """One readable line (plus the candidate's own frame), without harness traceback noise."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        if candidate_file and frame.filename == candidate_file:
            where = f" (candidate line {frame.lineno}: {(frame.line or '').strip()[:120]})"
            break
    msg = str(exc).strip().splitlines()
    first = next((line for line in msg if line.strip()), "")
    # Triton compilation errors put the useful line last.
    if type(exc).__name__ in ("CompilationError", "InterpreterError") and msg:
        first = " ".join(line.strip() for line in msg[-3:] if line.strip())
    return f"{type(exc).__name__}: {first[:400]}{where}"


def is_compile_error(exc: BaseException) -> bool:
    return type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct")


# --- the candidate worker --------------------------------------------------------------------------


def _fail(chan: Channel, status: str, error: str, **extra):
    chan.send(type="verdict", status=status, error=error, **extra)


def run_candidate(job: dict, chan: Channel):
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    baseline_flags = pin_global_flags()
    tracker = LaunchTracker()
    tracker.install()
    guarded = _guarded_functions()
    module = load_problem_module(job["problem_source"], job["sizes"])
    seeds = job["seeds"]
    candidate_file = job["candidate_file"]
    threads_before = threading.active_count()
    phases = {}  # wall seconds of the candidate's own work, to separate it from harness overhead
    clock = time.perf_counter()

    # 1. import and construct: failures here are compile errors
    try:
        spec = importlib.util.spec_from_file_location("candidate_module", candidate_file)
        candidate = importlib.util.module_from_spec(spec)
        sys.modules["candidate_module"] = candidate
        spec.loader.exec_module(candidate)
        if not hasattr(candidate, "ModelNew"):
            return _fail(chan, "format_error", "the code defines no ModelNew")
        model_new = build_model(candidate.ModelNew, module, seeds, device)
    except BaseException as e:  # candidate code can raise anything, SystemExit included
        return _fail(chan, "compile_error", short_error(e, candidate_file))
    phases["load_s"] = time.perf_counter() - clock
    if tampered := _tampered(guarded):
        return _fail(chan, "rejected", f"the candidate replaced {', '.join(tampered)} (monkeypatching)")
    if threading.active_count() > threads_before:
        return _fail(chan, "rejected", "the candidate started threads")
    if device.type == "cuda":
        tracker.expected_stream = torch.cuda.current_stream()

    checks = {"runtime_ops": [], "launches": [], "mutation": "ok", "flags": "ok", "kernel_written": "ok",
              "phases_s": phases}

    def checked_call(inputs):
        """One forward under every run-time check; returns (outputs, violation or None)."""
        before_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        capture = OpCapture(set(job["allowed_ops"]))
        tracker.reset(capture)
        tracker.active = True
        try:
            with torch.no_grad(), capture:
                out = model_new(*inputs)
            sync(device)
        finally:
            tracker.active = False
        outs = as_tensor_list(out)
        checks["launches"].append(tracker.launches)
        if tampered := _tampered(guarded):
            return outs, f"the candidate replaced {', '.join(tampered)} (monkeypatching)"
        if global_flags() != baseline_flags:
            changed = [k for k, v in global_flags().items() if baseline_flags[k] != v]
            checks["flags"] = changed
            return outs, f"the candidate changed torch global flags: {', '.join(changed)}"
        if threading.active_count() > threads_before:
            return outs, "the candidate started threads"
        if capture.forbidden:
            ops = sorted(set(capture.forbidden))
            checks["runtime_ops"] = ops
            return outs, f"forward calls torch compute ops {', '.join(ops[:6])}: the work must happen in custom kernels"
        if tracker.stream_violations:
            return outs, "a kernel was launched on a side stream"
        if tracker.launches == 0:
            return outs, "forward launched no custom kernel"
        for i, t in enumerate(outs):
            if not isinstance(t, torch.Tensor):
                return outs, f"output {i} is not a tensor"
            if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
                return outs, f"output {i} is a Tensor subclass ({type(t).__name__})"
            if not kernel_written(t, tracker, capture):
                checks["kernel_written"] = f"output {i}"
                return outs, f"output {i} was not written by any launched kernel (decoy launch)"
        for i, (a, b) in enumerate(zip(before_inputs, inputs)):
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                checks["mutation"] = f"input {i}"
                return outs, f"forward modified input {i} in place"
        return outs, None

    def run_checked(seed):
        inputs = make_inputs(module, seed, device)
        poison(device, job.get("poison_bytes", []))
        return checked_call(inputs)

    # 2. correctness trials: fresh seeded inputs, one model instance
    kept = []
    clock = time.perf_counter()
    for trial, seed in enumerate(seeds["trials"]):
        try:
            outs, violation = run_checked(seed)
        except BaseException as e:
            status = "compile_error" if is_compile_error(e) else "runtime_error"
            return _fail(chan, status, short_error(e, candidate_file), trial=trial, checks=checks)
        if violation:
            return _fail(chan, "rejected", violation, trial=trial, checks=checks)
        kept.append((seed, outs))
    phases["trials_s"] = time.perf_counter() - clock
    chan.send(type="outputs", phase="trials", checks=checks,
              items=[{"seed": s, "desc": export_tensors(o, job["job_dir"], f"trial{i}")} for i, (s, o) in enumerate(kept)])
    reply = chan.recv()
    if reply.get("type") != "continue":
        return
    del kept

    if not job["timing"]["enabled"]:
        return chan.send(type="done", checks=checks)

    # 3. timing, then check the output again (on fresh inputs and on spot-checked timed calls)
    clock = time.perf_counter()
    try:
        ref_model = build_model(module.Model, module, seeds, device)
        if job["timing"]["baseline"] == "compile":
            ref_model = torch.compile(ref_model)
        timing = time_models(ref_model, model_new, module, device, job["timing"], seeds["timing"],
                             spot=set(job["timing"]["spot_checks"]))
        outs, violation = run_checked(seeds["post_timing"])
    except BaseException as e:
        return _fail(chan, "runtime_error", "during timing: " + short_error(e, candidate_file), checks=checks)
    phases["timing_s"] = time.perf_counter() - clock
    if violation:
        return _fail(chan, "rejected", f"after timing: {violation}", checks=checks)
    items = [{"seed": seeds["post_timing"], "desc": export_tensors(outs, job["job_dir"], "post")}]
    for k, (seed, spot_outs) in enumerate(timing.pop("spot_outputs")):
        items.append({"seed": seed, "desc": export_tensors(spot_outs, job["job_dir"], f"spot{k}")})
    chan.send(type="outputs", phase="post_timing", checks=checks, timing=timing, items=items)
    chan.recv()
    chan.send(type="done", checks=checks)


def poison(device: torch.device, nbytes_list: list[int]):
    """Fill soon-to-be-reused allocator blocks with NaN so stale memory can never pass as output."""
    blocks = [torch.full((max(n, 4) // 4,), float("nan"), dtype=torch.float32, device=device)
              for n in nbytes_list for _ in range(2)]
    del blocks


def time_models(ref_model, new_model, module, device, cfg: dict, timing_seeds: list[int], spot: set[int]) -> dict:
    """Interleaved CUDA-event timing of reference and candidate on rotating fresh inputs, L2 flushed."""
    first = make_inputs(module, timing_seeds[0], device)
    set_bytes = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
    n_sets = max(2, min(len(timing_seeds), int(cfg["input_budget_bytes"] // max(set_bytes, 1))))
    timing_seeds = timing_seeds[:n_sets]
    input_sets = [first] + [make_inputs(module, s, device) for s in timing_seeds[1:]]
    flush = torch.empty(int(cfg["l2_flush_bytes"]) // 4, dtype=torch.float32, device=device)
    graphs = {}
    if cfg["mode"] == "cuda_graph":
        for name, model in (("ref", ref_model), ("new", new_model)):
            static_in = input_sets[0]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s), torch.no_grad():
                model(*static_in)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g), torch.no_grad():
                model(*static_in)
            graphs[name] = g

    def call(name, model, inputs):
        if name in graphs:
            graphs[name].replay()
            return None
        return model(*inputs)

    models = {"ref": ref_model, "new": new_model}
    with torch.no_grad():
        for i in range(cfg["warmup"]):
            for name in ("ref", "new"):
                call(name, models[name], input_sets[i % len(input_sets)])
        sync(device)
        times = {"ref": [], "new": []}
        spot_outputs = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(cfg["iters"]):
            order = ("ref", "new") if i % 2 == 0 else ("new", "ref")  # alternate to cancel drift
            for name in order:
                # Different sets for the two models in one iteration: memory the reference just wrote
                # holds the answer to other inputs than the candidate's.
                k = (i + (name == "new")) % len(input_sets)
                flush.zero_()
                torch.cuda.synchronize(device)
                start.record()
                out = call(name, models[name], input_sets[k])
                end.record()
                torch.cuda.synchronize(device)  # every stream, before reading the end event
                times[name].append(start.elapsed_time(end) * 1000.0)
                if name == "new" and i in spot and out is not None:  # checked by the judge afterwards
                    spot_outputs.append((timing_seeds[k], [t.clone() for t in as_tensor_list(out)]))
    return {"ref_us": times["ref"], "new_us": times["new"], "spot_outputs": spot_outputs}


# --- the judge -------------------------------------------------------------------------------------


def default_tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.float64) else 1e-2


def compare(ref: list, got: list, tol: dict) -> tuple[bool, str, dict]:
    """Elementwise check of candidate outputs against reference outputs; returns (ok, message, stats)."""
    if len(ref) != len(got):
        return False, f"expected {len(ref)} outputs, got {len(got)}", {}
    stats = {}
    for i, (r, g) in enumerate(zip(ref, got)):
        if not isinstance(r, torch.Tensor):
            continue
        if tuple(r.shape) != tuple(g.shape):
            return False, f"output {i} has shape {tuple(g.shape)}, expected {tuple(r.shape)}", stats
        if r.dtype != g.dtype:
            return False, f"output {i} has dtype {g.dtype}, expected {r.dtype}", stats
        if r.is_contiguous() and not g.is_contiguous():
            return False, f"output {i} is not contiguous (the reference output is)", stats
        g = g.to(r.device)
        atol = tol.get("atol", default_tolerance(r.dtype))
        rtol = tol.get("rtol", default_tolerance(r.dtype))
        ok, max_diff, n_bad, n_nonfinite = _compare_chunked(r.reshape(-1), g.reshape(-1), atol, rtol)
        stats[f"output{i}_max_abs_diff"] = max_diff
        if n_nonfinite:
            return False, f"output {i} has {n_nonfinite} NaN/Inf values where the reference is finite", stats
        if not ok:
            return False, (f"output {i} mismatch: max abs diff {max_diff:.3g}, {n_bad / max(r.numel(), 1):.1%} of "
                           f"elements outside atol={atol:g} rtol={rtol:g}"), stats
    return True, "", stats


def _compare_chunked(r, g, atol, rtol, chunk: int = 1 << 25):
    """float64 elementwise check in slices, so a multi-GB output needs no multi-GB temporaries."""
    max_diff, n_bad, n_nonfinite = 0.0, 0, 0
    for start in range(0, r.numel(), chunk):
        r64, g64 = r[start:start + chunk].double(), g[start:start + chunk].double()
        n_nonfinite += int((~torch.isfinite(g64) & torch.isfinite(r64)).sum())
        diff = (r64 - g64).abs()
        within = (diff <= atol + rtol * r64.abs()) | (torch.isnan(r64) & torch.isnan(g64))
        n_bad += int((~within).sum())
        finite = diff[torch.isfinite(diff)]
        if finite.numel():
            max_diff = max(max_diff, float(finite.max()))
    return n_bad == 0 and n_nonfinite == 0, max_diff, n_bad, n_nonfinite


def run_judge(job: dict, chan: Channel):
    """Long-lived: computes reference outputs (cached per problem) and compares candidate outputs."""
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    pin_global_flags()
    state = {"key": None}
    refs: dict[int, list] = {}
    while True:
        msg = chan.recv()
        op = msg["op"]
        try:
            if op == "prepare":
                key = (msg["problem_source"], json.dumps(msg["sizes"], sort_keys=True), json.dumps(msg["seeds"]))
                if state["key"] != key:
                    refs.clear()
                    state.pop("model", None)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    module = load_problem_module(msg["problem_source"], msg["sizes"])
                    model = build_model(module.Model, module, msg["seeds"], device)
                    state.update(key=key, module=module, model=model, seeds=msg["seeds"])
                out = reference_outputs(state, refs, msg["seeds"]["trials"][0], device)
                chan.send(ok=True, device_name=device_name(device),
                          output_bytes=[t.numel() * t.element_size() for t in out if isinstance(t, torch.Tensor)])
            elif op == "compare":
                results = []
                for item in msg["items"]:
                    got = import_tensors(item["desc"], msg["job_dir"])
                    ref = reference_outputs(state, refs, item["seed"], device)
                    ok, message, stats = compare(ref, got, msg["tolerance"])
                    del got
                    results.append({"seed": item["seed"], "ok": ok, "message": message, "stats": stats})
                    if not ok:
                        break
                sync(device)
                chan.send(ok=True, results=results)
            elif op == "ping":
                chan.send(ok=True)
        except Exception as e:  # a bad descriptor or reference failure must not kill the judge
            chan.send(ok=False, error=short_error(e))


def device_name(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu (Triton interpreter)"
    backend = f"ROCm {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}"
    return f"{device} ({torch.cuda.get_device_name(device)}, {backend})"


JUDGE_CACHE_BYTES = 8 << 30  # reference outputs kept per problem; others are recomputed when asked


def reference_outputs(state: dict, refs: dict, seed: int, device) -> list:
    if seed in refs:
        return refs[seed]
    inputs = make_inputs(state["module"], seed, device)
    with torch.no_grad():
        out = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in as_tensor_list(state["model"](*inputs))]
    del inputs
    sync(device)
    cached = sum(t.numel() * t.element_size() for ts in refs.values() for t in ts if isinstance(t, torch.Tensor))
    if cached + sum(t.numel() * t.element_size() for t in out if isinstance(t, torch.Tensor)) <= JUDGE_CACHE_BYTES:
        refs[seed] = out
    return out


def run_job(job: dict, sock) -> None:
    chan = Channel(sock)
    os.chdir(job["job_dir"])
    if job["kind"] == "judge":
        run_judge(job, chan)
    else:
        try:
            run_candidate(job, chan)
        except EOFError:
            pass

