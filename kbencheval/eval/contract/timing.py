"""Timing. `time_models`: eager (KernelBench-style) timing inside the candidate worker. `Timer`: the
trusted mode's per-model timer (graph replay, fresh inputs every iteration), used by the judge for the
reference and by the worker for the candidate; the harness bounds the candidate's figures from outside.

`time_models` interleaves CUDA-event timing of reference and candidate on rotating fresh inputs, L2
flushed, the device synchronised before every end event is read. Its numbers are measured next to
the candidate, so they are only as trustworthy as the candidate is honest (docs/evaluator.md).
"""

from __future__ import annotations

import functools
import time

import torch

from kbencheval.eval.contract.device_kernels import device_report, graph_kernels, profiled_kernels
from kbencheval.eval.contract.fresh_inputs import FreshInputs, end_rng_capture_state
from kbencheval.eval.contract.inputs import as_tensor_list, digest_bounds, digests_match, make_inputs, output_digest, sync
from kbencheval.eval.sharing.parts import Parts
from kbencheval.eval.contract.protocol import TimingSpec, Trial


def capture_graphs(models: dict, static_in: list) -> dict:
    graphs = {}
    for name, model in models.items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            model(*static_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph(keep_graph=True)  # keeps the cudaGraph_t, whose kernel nodes we list
        with torch.cuda.graph(g), torch.no_grad():
            model(*static_in)
        g.instantiate()
        graphs[name] = g
    return graphs


def graph_report(graph) -> dict:
    """The kernels of a graph captured with keep_graph=True: the very graph its replays run."""
    return device_report("graph", lambda: graph_kernels(graph.raw_cuda_graph()))


def profiled_report(call) -> dict:
    """The device kernels of one eager call, for a model that was not captured."""
    return device_report("profiler", lambda: profiled_kernels(call))


def time_models(ref_model, new_model, module, device, spec: TimingSpec, trials: list[Trial], spot: set[int]) -> dict:
    """Returns per-call µs of both models, the candidate's outputs at the `spot` iterations and the
    kernels it ran on the device (`device_kernels`)."""
    first = make_inputs(module, trials[0], device)
    set_bytes = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
    n_sets = max(2, min(len(trials), int(spec.input_budget_bytes // max(set_bytes, 1))))
    trials = trials[:n_sets]
    input_sets = [first] + [make_inputs(module, t, device) for t in trials[1:]]
    flush = torch.empty(int(spec.l2_flush_bytes) // 4, dtype=torch.float32, device=device)
    models = {"ref": ref_model, "new": new_model}
    graphs = capture_graphs(models, input_sets[0]) if spec.mode == "cuda_graph" else {}

    def call(name, inputs):
        if name in graphs:
            graphs[name].replay()
            return None
        return models[name](*inputs)

    with torch.no_grad():
        for i in range(spec.warmup):
            for name in ("ref", "new"):
                call(name, input_sets[i % len(input_sets)])
        sync(device)
        times = {"ref": [], "new": []}
        spot_outputs = []
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(spec.iters):
            order = ("ref", "new") if i % 2 == 0 else ("new", "ref")  # alternate to cancel drift
            for name in order:
                # Different sets for the two models in one iteration: memory the reference just wrote
                # holds the answer to other inputs than the candidate's.
                k = (i + (name == "new")) % len(input_sets)
                flush.zero_()
                torch.cuda.synchronize(device)
                start.record()
                out = call(name, input_sets[k])
                end.record()
                torch.cuda.synchronize(device)  # every stream, before reading the end event
                times[name].append(start.elapsed_time(end) * 1000.0)
                if name == "new" and i in spot and out is not None:  # checked by the judge afterwards
                    spot_outputs.append((trials[k], [t.clone() for t in as_tensor_list(out)]))
        # What the candidate ran on the device: its timed graph, or one more eager call under the profiler.
        kernels = graph_report(graphs["new"]) if "new" in graphs else \
            profiled_report(lambda: call("new", input_sets[0]))
    return {"ref_us": times["ref"], "new_us": times["new"], "spot_outputs": spot_outputs, "device_kernels": kernels}


class Timer:
    """Times one model with no Python of that model between the timing events (trusted mode).

    The model is captured once into a CUDA graph on static inputs; every timed iteration first writes
    fresh input values (a new seed, generated on the device) into those static inputs and flushes L2,
    outside the events, then replays the graph. `device_kernels` lists the graph's kernel nodes: the
    graph replayed in the timed loop is the one listed. A model that cannot be captured (a host sync in
    forward) is timed eagerly instead, and `mechanism` says so. On the CPU (protocol tests only) the
    clock is perf_counter and the call is eager.
    """

    def __init__(self, model, module, device: torch.device, spec: TimingSpec, first: Trial, on_eager_call=None,
                 parts: Parts | None = None, as_outputs=as_tensor_list, check_replay: bool = False):
        """`check_replay` (the worker's): a captured graph is kept only if its replay computes what an eager
        call computes on the same fresh inputs (`replay_matches_eager`); else the model is timed eagerly."""
        self.model, self.module, self.device, self.spec = model, module, device, spec
        self.on_eager_call = on_eager_call  # the worker's stream/thread checks around an eager call
        self.as_outputs = as_outputs  # the worker's: plain tensors only (transfer.plain_outputs)
        parts = parts or Parts()
        self.fresh = FreshInputs(module, device, first)
        parts.mark("fresh_inputs_s")
        self.static_in = self.fresh.static
        self.flush = torch.empty(int(spec.l2_flush_bytes) // 4, dtype=torch.float32, device=device) \
            if device.type == "cuda" else None
        self.graph, self.static_out = None, None
        self.device_kernels = None  # the captured graph's kernels; an eager model's are profiled by the worker
        self.mechanism = "eager (cpu: protocol test, numbers meaningless)"
        if device.type == "cuda":
            stream = torch.cuda.current_stream(device)
            try:
                self.graph, self.static_out = self._capture()
                self.mechanism = "cuda_graph"
                parts.mark("capture_s")
                if check_replay and not self.replay_matches_eager(first, parts):
                    self.graph = self.static_out = None
                    torch.cuda.synchronize(device)
                    self.mechanism = ("eager (the captured graph does not compute what an eager call does: launches "
                                      "the capture did not see, e.g. on the default stream)")
                else:
                    self.device_kernels = graph_report(self.graph)
            except Exception as e:  # noqa: BLE001 - any capture failure means: time it eagerly
                # A capture that raised never left its capture stream (torch.cuda.graph's exit raises
                # before restoring it): every later launch would look like a side-stream launch.
                torch.cuda.set_stream(stream)
                torch.cuda.synchronize(device)
                end_rng_capture_state(device)
                self.mechanism = f"eager (cannot capture: {type(e).__name__}: {str(e).splitlines()[0][:120]})"
        parts.mark("capture_s")
        with torch.no_grad():
            for _ in range(spec.warmup):
                self._call()
        sync(device)
        self.launch_cover_cycles = 0
        if device.type == "cuda" and self.graph is None:
            self.launch_cover_cycles = self._launch_cover()
            self.mechanism += (f"; the device waits {self.launch_cover_cycles / sleep_cycles_per_us(device):.0f} us "
                               "before each start event, so the events hold device time, not launch latency")
        parts.mark("warmup_s")
        # One untimed pass of the timed loop: its allocations and first kernel loads (lazy module loading)
        # happen here, not in the first round, which the harness's wall clock bounds. The judge's timer
        # lives on across candidates and is warm already; without this the worker's first round was not.
        self.run([first])
        parts.mark("untimed_pass_s")

    def _launch_cover(self) -> int:
        """Cycles of a device-side wait queued before an eager call's start event. A graph replay is one
        launch; an eager call is launched from the host while the events run, so after a sync its start
        event would also time the host's launch latency (the whole gap for a short kernel). One and a half
        times one call's host time, so the call is queued before the device reaches the start event. At most
        1 ms: the wait is wall time the events do not explain, and the harness's wall bound
        (timing_checks.check_wall_bound) leaves 5 ms a round of 5 iterations for such differences; a call
        whose host side takes longer keeps part of its launch latency in its figures, as before."""
        with torch.no_grad():
            clock = time.perf_counter()
            self._call()
            host_s = time.perf_counter() - clock
        sync(self.device)
        return int(min(1.5 * host_s + 30e-6, 1e-3) * 1e6 * sleep_cycles_per_us(self.device))

    def _capture(self):
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.model(*self.static_in)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph(keep_graph=True)  # keeps the cudaGraph_t, whose kernel nodes we list
            with torch.cuda.graph(graph):
                out = self.as_outputs(self.model(*self.static_in))
            graph.instantiate()
        return graph, out

    def replay_matches_eager(self, first: Trial, parts: Parts | None = None) -> bool:
        """Whether a replay of the captured graph writes the outputs an eager call computes, on inputs the
        capture never saw (its outputs poisoned first). A kernel launched on the legacy default stream runs
        once while the capture is made and is not in the graph (torch captures on a stream of its own):
        every replay would then leave the capture's stale outputs, and an honest kernel would be judged
        `incorrect` in its timed iterations. So would a model that computes only when it is not captured,
        which then gets timed eagerly, computing. `parts` gets the check's three steps (host seconds; the
        comparison waits for the device)."""
        parts = parts or Parts()
        probe = Trial(seed=(first.seed ^ 0x5EED_C0DE) & ((1 << 62) - 1))
        with torch.no_grad():
            self.fresh.load(probe)
            for t in self.static_out:
                if isinstance(t, torch.Tensor):
                    t.fill_(float("nan") if t.is_floating_point() or t.is_complex() else 0)
            self.graph.replay()
            replayed = outputs_digest(self.static_out)  # queued: no copy of the outputs beside the eager call's
            parts.mark("replay_check_replay_s")
            self.fresh.load(probe)  # the same values again: the model may have written into its inputs
            eager = self._eager_call()
            parts.mark("replay_check_eager_s")
            agree = digests_agree(replayed, eager)
            parts.mark("replay_check_compare_s")
            return agree

    def _eager_call(self) -> list:
        if self.on_eager_call is not None:
            return self.on_eager_call(lambda: self.as_outputs(self.model(*self.static_in)))
        return self.as_outputs(self.model(*self.static_in))

    def _call(self) -> list:
        if self.graph is not None:
            self.graph.replay()
            return self.static_out
        return self._eager_call()

    def run(self, trials: list[Trial], digest_seed: int = 1) -> tuple[list[float], list[list[float]]]:
        """µs per iteration, one fresh input set each, and each iteration's `output_digest`: the worker's
        commitment to what that iteration produced, sent with the round. Nothing else is kept: the
        outputs the harness picks are recomputed afterwards (`output_for`) and checked against these.

        The judge (reference) and the worker (candidate) run this same loop, digests included, so the
        harness can take the reference's wall-clock overhead as the candidate's. A digest is queued
        after the timed call and read once per round, so it adds no sync of its own."""
        if self.graph is not None:
            return self._run_queued(trials, digest_seed)
        times, digests = [], []
        cuda = self.device.type == "cuda"
        with torch.no_grad():
            for trial in trials:
                self.fresh.load(trial)
                if cuda:
                    self.flush.zero_()
                    torch.cuda.synchronize(self.device)
                    if self.launch_cover_cycles:
                        torch.cuda._sleep(self.launch_cover_cycles)  # the device waits while the host launches
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out = self._call()
                    end.record()
                    torch.cuda.synchronize(self.device)  # every stream, before reading the end event
                    times.append(start.elapsed_time(end) * 1000.0)
                else:
                    clock = time.perf_counter()
                    out = self._call()
                    times.append((time.perf_counter() - clock) * 1e6)
                digests.append(output_digest(out, digest_seed))
        return times, torch.stack(digests).tolist() if digests else []

    def _run_queued(self, trials: list[Trial], digest_seed: int) -> tuple[list[float], list[list[float]]]:
        """`run` for a captured graph: the whole round is queued on one stream and the host waits once,
        at its end. Each iteration's events still enclose only its replay (stream order puts the input
        writes and the flush before the start event), and the device does not idle waiting for the host
        between iterations. With two host syncs per iteration, each a turn among the processes sharing
        the device, an iteration took well beyond its device work (docs/history/evaluator-performance.md)."""
        events, digests = [], []
        with torch.no_grad():
            for trial in trials:
                self.fresh.load(trial)
                self.flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = self._call()
                end.record()
                events.append((start, end))
                digests.append(output_digest(out, digest_seed))
        torch.cuda.synchronize(self.device)  # every stream, before reading any event
        return [s.elapsed_time(e) * 1000.0 for s, e in events], torch.stack(digests).tolist() if digests else []

    def output_for(self, trial: Trial, wait: bool = True) -> list:
        """The model's outputs on `trial`'s inputs, computed as a timed iteration computes them (the graph
        replayed on the static inputs): what the harness picked from a round, recomputed for the judge.
        A graph's outputs live in its static buffers until the next call. `wait=False`: queued, for a
        caller whose next work on them is queued behind on the same stream (the judge)."""
        with torch.no_grad():
            self.fresh.load(trial)
            out = self._call()
        if wait:
            sync(self.device)
        return out

def outputs_digest(outs: list) -> tuple[list, torch.Tensor]:
    """A call's outputs, summed up for `digests_agree`: their layout and their digest (queued, not read)."""
    tensors = [t for t in outs if isinstance(t, torch.Tensor)]
    return [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else None for t in outs], \
        output_digest(tensors, 0x5EED)


def digests_agree(summary: tuple[list, torch.Tensor], outs: list) -> bool:
    """Whether `outs` are the outputs `summary` (outputs_digest) was made of, up to a nondeterministic
    kernel's rounding: the same layout, digests within the judge's allowance for a recomputed timed output
    (inputs.digests_match; its bounds in torch ops, since a worker cannot import the judge's kernels)."""
    layout, digest = summary
    other_layout, other_digest = outputs_digest(outs)
    tensors = [t for t in outs if isinstance(t, torch.Tensor)]
    return layout == other_layout and \
        digests_match(digest.tolist(), other_digest.tolist(), digest_bounds(tensors))


def measure_bandwidth_gbs(device: torch.device, nbytes: int = 256 << 20) -> float:
    """Device-to-device copy bandwidth (read + write), best of five: the floor check's yardstick."""
    if device.type != "cuda":
        return 0.0
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize(device)
        best = min(best, start.elapsed_time(end) / 1000.0)
    return 2 * nbytes / best / 1e9


@functools.lru_cache(maxsize=None)
def sleep_cycles_per_us(device: torch.device) -> float:
    """How many cycles of torch.cuda._sleep one microsecond holds on this device, measured once."""
    cycles = 2_000_000
    with torch.cuda.device(device):
        torch.cuda._sleep(cycles // 10)  # first launch outside the measurement
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
    return cycles / max(start.elapsed_time(end) * 1000.0, 1.0)
