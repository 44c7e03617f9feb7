"""The device gate: correctness work overlaps, timing is alone, and a waiting timer is not starved."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from kbencheval.eval.sharing import gate as gate_module
from kbencheval.eval.sharing.gate import DeviceGate, physical_device_key
from tests.support import another_reservation, out_of_memory_once


def _overlap(a: dict, b: dict) -> bool:
    """Did any hold of window `a` overlap any hold of window `b` (a phase may hold the gate several times)?"""
    holds = lambda w: w.get("holds") or [[w["start"], w["end"]]]  # noqa: E731
    return any(s1 < e2 and s2 < e1 for s1, e1 in holds(a) for s2, e2 in holds(b))


def test_shared_holders_overlap_and_the_exclusive_one_is_alone(tmp_path):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    windows = {}

    def hold(name, side, seconds, delay=0.0):
        time.sleep(delay)
        windows[name] = {}
        with getattr(gate, side)(windows[name]):
            time.sleep(seconds)

    threads = [threading.Thread(target=hold, args=(f"check{i}", "shared", 0.3)) for i in range(3)]
    threads.append(threading.Thread(target=hold, args=("timing", "exclusive", 0.2, 0.05)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    checks = [windows[f"check{i}"] for i in range(3)]
    assert _overlap(checks[0], checks[1]) or _overlap(checks[1], checks[2])  # correctness runs side by side
    assert not any(_overlap(windows["timing"], c) for c in checks)  # timing had the device alone
    assert windows["timing"]["wait_s"] > 0.1  # it waited for the checks already inside


GB = 1 << 30


def _reserve_in_thread(gate, windows, name, nbytes, capacity, seconds, delay=0.0):
    def hold():
        time.sleep(delay)
        windows[name] = {}
        with gate.reserve(nbytes, capacity, windows[name]):
            time.sleep(seconds)
    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_candidates_that_fit_the_device_together_run_together_and_the_rest_wait(tmp_path):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    windows = {}
    threads = [_reserve_in_thread(gate, windows, "a", 30 * GB, 72 * GB, 0.3),
               _reserve_in_thread(gate, windows, "b", 30 * GB, 72 * GB, 0.3, delay=0.02),
               _reserve_in_thread(gate, windows, "c", 30 * GB, 72 * GB, 0.3, delay=0.04)]
    for t in threads:
        t.join(10)
    assert _overlap(windows["a"], windows["b"])  # 60 of 72 GB: side by side (one lock took turns before)
    assert windows["c"]["start"] >= windows["a"]["end"]  # a third does not fit: it starts when one ends
    assert windows["c"]["wait_s"] > 0.15
    assert gate.reserved() == {"held": {}, "queue": [], "standing": {}}  # every reservation given back


def _large_waits_beside_small(gate, small_delay: float) -> dict:
    """50 GB running, then a 40 GB request (90 GB do not fit 72), then a 2 GB one after `small_delay`."""
    windows = {}
    threads = [_reserve_in_thread(gate, windows, "running", 50 * GB, 72 * GB, 0.4),
               _reserve_in_thread(gate, windows, "large", 40 * GB, 72 * GB, 0.1, delay=0.05),
               _reserve_in_thread(gate, windows, "small", 2 * GB, 72 * GB, 0.1, delay=small_delay)]
    for t in threads:
        t.join(10)
    assert windows["large"]["start"] >= windows["running"]["end"]
    return windows


def test_small_candidates_go_first_while_a_large_one_waits_but_only_for_a_while(tmp_path, monkeypatch):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    windows = _large_waits_beside_small(gate, small_delay=0.1)
    assert _overlap(windows["small"], windows["running"])  # fits now: runs while the large one waits
    monkeypatch.setattr(gate_module, "BYPASS_S", 0.05)  # the large one has waited long enough: no one passes
    windows = _large_waits_beside_small(gate, small_delay=0.15)
    # The small one waits behind the large one, so neither starts before the running one ends; the two
    # are then let in together, in either order.
    assert not _overlap(windows["small"], windows["running"])


def test_a_worker_started_while_its_reservation_waits_counts_against_the_others(tmp_path):
    """The harness starts a candidate's worker once its request is in line (on_queued); that worker's
    context and weights (early_bytes) are on the device during the wait, so a later request that would
    fit only without them waits too."""
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    windows, started = {}, {}

    def early():
        windows["early"] = {}
        with gate.reserve(40 * GB, 72 * GB, windows["early"], early_bytes=4 * GB,
                          on_queued=lambda: started.setdefault("at", time.monotonic())):
            time.sleep(0.1)

    running = _reserve_in_thread(gate, windows, "running", 40 * GB, 72 * GB, 0.4)
    time.sleep(0.05)
    threads = [threading.Thread(target=early), _reserve_in_thread(gate, windows, "small", 30 * GB, 72 * GB, 0.1,
                                                                  delay=0.1)]
    threads[0].start()
    for t in [running, *threads]:
        t.join(10)
    assert started["at"] < windows["running"]["end"] <= windows["early"]["start"]  # started while it waited
    # 40 + 30 GB fit 72, but not beside the waiting worker's 4 GB: the small one could not pass.
    assert windows["small"]["start"] >= windows["running"]["end"]
    assert gate.reserved() == {"held": {}, "queue": [], "standing": {}}


def test_a_request_joins_the_line_only_once_its_worker_is_ready(tmp_path, monkeypatch):
    """The harness registers a candidate's request, gives its worker the job, and polls `ready` (the
    worker has loaded and compiled): until then the request is not admitted, even with room to spare,
    and it keeps no one behind it waiting, however long it takes (no bypass limit applies to it). Once
    ready, it takes its place in line, behind those already in it."""
    monkeypatch.setattr(gate_module, "BYPASS_S", 0.05)  # a large request first in line would soon block all
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    windows, flag = {}, threading.Event()

    def compiling():
        windows["compiling"] = {}
        with gate.reserve(60 * GB, 72 * GB, windows["compiling"], early_bytes=4 * GB, ready=flag.is_set):
            time.sleep(0.05)

    first = threading.Thread(target=compiling)
    first.start()
    time.sleep(0.1)  # registered first, and past the bypass limit
    later = _reserve_in_thread(gate, windows, "later", 60 * GB, 72 * GB, 0.4)
    ahead = _reserve_in_thread(gate, windows, "ahead", 60 * GB, 72 * GB, 0.05, delay=0.05)
    time.sleep(0.15)
    assert "start" not in windows["compiling"]  # room at first, but its worker is not ready
    assert windows["later"]["wait_s"] < 0.1  # registered after it, admitted without waiting for it
    flag.set()  # ready now, after `ahead` joined the line
    for t in (first, later, ahead):
        t.join(10)
    assert windows["compiling"]["ready_after_s"] >= 0.25
    assert windows["later"]["end"] <= windows["ahead"]["start"] <= windows["compiling"]["start"]
    assert gate.reserved() == {"held": {}, "queue": [], "standing": {}}


def test_a_candidate_larger_than_the_device_runs_alone_and_a_dead_holder_frees_its_memory(tmp_path):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    windows = {}
    _reserve_in_thread(gate, windows, "huge", 100 * GB, 72 * GB, 0.05).join(10)
    assert windows["huge"]["wait_s"] < 0.5  # alone on the device: admitted whatever its estimate
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gate.update_ledger(lambda ledger: ledger["held"].update(crashed=[dead.pid, 70 * GB]))  # as a crash leaves it
    _reserve_in_thread(gate, windows, "next", 30 * GB, 72 * GB, 0.05).join(10)
    assert windows["next"]["wait_s"] < 0.5  # the crashed holder's 70 GB did not count


def test_a_waiting_timer_is_not_starved_by_a_stream_of_checks(tmp_path):
    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    stop = time.monotonic() + 3.0
    timed = {}

    def checker():
        while time.monotonic() < stop:
            with gate.shared():
                time.sleep(0.05)

    workers = [threading.Thread(target=checker) for _ in range(3)]
    for w in workers:
        w.start()
    time.sleep(0.2)
    with gate.exclusive(timed):
        pass
    for w in workers:
        w.join(10)
    assert timed["wait_s"] < 1.0  # behind the checks already inside, not behind every later one


def test_gates_are_per_physical_device(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-abc")
    assert physical_device_key("cuda:0") == "gpu-3" and physical_device_key("cuda:1") == "gpu-GPU-abc"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert physical_device_key("cuda:2") == "gpu-2" and physical_device_key("cpu") == "cpu"
    first, other = DeviceGate("cuda:0", str(tmp_path)), DeviceGate("cuda:1", str(tmp_path))
    with first.exclusive():
        done = threading.Event()
        threading.Thread(target=lambda: (other.exclusive().__enter__(), done.set()), daemon=True).start()
        assert done.wait(2)  # another GPU's timer does not wait for this one


@pytest.mark.slow
def test_two_evaluators_on_one_device_never_time_while_the_other_checks(tmp_path):
    """Two Evaluators on one (CPU) device evaluate concurrently; the timing window of each candidate
    overlaps no correctness or timing window of the other's."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    relu = next(p for p in load_bundled(1) if p.problem_id == 1)
    text = "```python\n" + relu.solution_source + "```"
    cfg = EvalConfig(device="cpu", trials=2, timing_on_cpu=True, iters=20, warmup=1, stress_trials=False)
    results = {0: [], 1: []}

    def run(k, ev):
        for _ in range(3):
            results[k].append(ev.evaluate(relu, text))

    with Evaluator(cfg) as a, Evaluator(cfg) as b:
        threads = [threading.Thread(target=run, args=(0, a)), threading.Thread(target=run, args=(1, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert all(r.correct for rs in results.values() for r in rs), [r.error for rs in results.values() for r in rs]
    windows = {k: [r.checks["device_gate"] for r in rs] for k, rs in results.items()}
    for k, other in ((0, 1), (1, 0)):
        for gate in windows[k]:
            for theirs in windows[other]:
                for phase in ("prepare", "trials", "timing"):
                    assert not _overlap(gate["timing"], theirs[phase]), (k, phase)
    shared_overlaps = sum(_overlap(g["trials"], t["trials"]) for g in windows[0] for t in windows[1])
    print("correctness windows that overlapped:", shared_overlaps)


def test_a_device_out_of_memory_error_is_retried_with_the_device_alone():
    """Evaluators sharing a GPU can take the memory an honest candidate needs (4 per H100 failed 11 of
    40 bundled solutions that way): a CUDA OOM verdict is re-run once under the exclusive gate."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    relu = next(p for p in load_bundled(1) if p.problem_id == 1)
    head = "def forward(self, x: torch.Tensor) -> torch.Tensor:"
    assert head in relu.solution_source

    def failing(statement: str) -> str:
        return "```python\n" + relu.solution_source.replace(head, f"{head}\n        {statement}") + "```"

    results = []
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False, timeout_s=60)) as ev:
        other = DeviceGate("cpu")  # another Evaluator's correctness work on the same device
        with other.shared():  # the first run shares the device with it; the re-run must wait until it lets go
            worker = threading.Thread(target=lambda: results.append(
                ev.evaluate(relu, failing("raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB')"))))
            worker.start()
            _wait_for_an_exclusive_waiter(other)
            time.sleep(1.0)
        worker.join(120)
        broken = ev.evaluate(relu, failing("raise RuntimeError('no')"))
    [oom] = results
    assert oom.status.value == "runtime_error" and "CUDA out of memory" in oom.error
    first_run = oom.checks["device_oom_retry"]["first_run"]
    assert "CUDA out of memory" in first_run["error"] and first_run["ledger"]["holders"] == 0
    assert oom.checks["device_gate"]["prepare"]["wait_s"] > 0.5  # the re-run waited for the device to be its own
    assert broken.status.value == "runtime_error" and "device_oom_retry" not in broken.checks  # no retry


def test_device_out_of_memory_errors_are_told_from_other_errors():
    from kbencheval.eval.trusted.harness import device_out_of_memory
    from kbencheval.eval import EvalResult, Status

    def oom(error: str, status=Status.RUNTIME_ERROR) -> bool:
        return device_out_of_memory(EvalResult(status, error=error))

    assert oom("OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB")
    assert oom("RuntimeError: CUDA error: out of memory")
    assert oom("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    assert oom("RuntimeError: HIPBLAS_STATUS_ALLOC_FAILED")
    assert oom("cuDNN error: CUDNN_STATUS_ALLOC_FAILED")
    assert not oom("RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`")
    assert not oom("MemoryError: host out of memory")
    assert not oom("CUDA out of memory", status=Status.INCORRECT)  # a verdict, not a failure to run


def test_a_reference_that_ran_out_of_memory_is_prepared_again_once_every_reservation_has_ended(monkeypatch):
    """A judge prepares before its candidate's reservation (whose size it tells), counted nowhere: eight
    judges starting a pass at once filled an H100, and an honest candidate got `the reference itself
    failed`. Its prepare runs again once no reservation is held, and the candidate is judged as usual."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator
    from kbencheval.eval.contract.protocol import Prepare

    relu = next(p for p in load_bundled(1) if p.problem_id == 1)
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False, timeout_s=60)) as ev:
        prepares: list = []
        monkeypatch.setattr(ev, "judge_call", out_of_memory_once(ev.judge_call, Prepare, prepares))
        with another_reservation(DeviceGate("cpu"), 1 << 30, 8 << 30, seconds=1.5) as released:
            result = ev.evaluate(relu, "```python\n" + relu.solution_source + "```")
    assert result.correct, result.error
    assert "prepare_oom_retry" in result.checks and len(prepares) == 2
    assert released and prepares[1] >= released[0]  # not beside the other's memory
    assert result.checks["device_gate"]["prepare_alone"]["wait_s"] > 0.5


def _wait_for_an_exclusive_waiter(gate: DeviceGate, timeout_s: float = 120.0) -> None:
    """Until someone holds the gate's turnstile for a while: an exclusive holder keeps it while it waits
    (a shared one takes it only for an instant)."""
    import fcntl
    import os

    fd = os.open(gate.paths["turnstile"], os.O_RDWR)
    try:
        busy_since, deadline = None, time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                busy_since = None
            except BlockingIOError:
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since > 0.3:
                    return
            time.sleep(0.05)
        raise AssertionError("nobody waited for the device alone")
    finally:
        os.close(fd)


def test_a_worker_killed_by_a_driver_out_of_memory_error_names_it_and_is_retried():
    """torch's CUDA errors end in three lines of advice; a worker that dies of one ("CUDA error: out of
    memory", e.g. its context created on a full device) must say so, and is re-run with the device alone."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator

    relu = next(p for p in load_bundled(1) if p.problem_id == 1)
    head = "def forward(self, x: torch.Tensor) -> torch.Tensor:"
    dies = "\n".join(f"        {line}" for line in (
        "import os, sys",
        "print('RuntimeError: CUDA error: out of memory', file=sys.stderr)",
        "print('CUDA kernel errors might be asynchronously reported at some other API call', file=sys.stderr)",
        "print('For debugging consider passing CUDA_LAUNCH_BLOCKING=1', file=sys.stderr)",
        "print('Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.', file=sys.stderr)",
        "sys.stderr.flush()",
        "os._exit(1)"))
    text = "```python\n" + relu.solution_source.replace(head, f"{head}\n{dies}") + "```"
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False, timeout_s=60, static_checks=False,
                                accept_cpu_tripwires_only=True)) as ev:
        result = ev.evaluate(relu, text)
    assert result.status.value == "runtime_error", result.error
    assert "exited with code 1" in result.error and "RuntimeError: CUDA error: out of memory" in result.error
    assert "device_oom_retry" in result.checks


def test_what_an_idle_judge_keeps_counts_against_the_others_until_its_evaluator_reserves_again(tmp_path):
    """An Evaluator's judge keeps the problem's timer and outputs between candidates: that standing
    memory holds back other Evaluators' candidates, but not its own next one (its reservation covers
    the judge), and is gone once the Evaluator closes."""
    import os

    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    with gate.reserve(10 * GB, 25 * GB, owner="a") as reservation:
        reservation.standing_after = 8 * GB
    assert gate.reserved()["standing"] == {"a": [os.getpid(), 8 * GB]}
    started = threading.Event()
    release_c = threading.Event()

    def hold_c():
        with gate.reserve(10 * GB, 25 * GB, owner="c"):
            started.set()
            release_c.wait(10)

    c = threading.Thread(target=hold_c)
    c.start()
    assert started.wait(10)  # 8 standing + 10 fit
    windows = {"b": {}}
    b = _reserve_in_background(gate, 10 * GB, 25 * GB, windows["b"], owner="b")
    assert "start" not in windows["b"]  # 8 standing + 10 held + 10 > 25: b waits
    ledger = gate.reserved()
    assert len(ledger["queue"]) == 1 and ledger["queue"][0][2] == 10 * GB
    # a's own next candidate: its judge is inside its reservation, so 10 held + 15 fit (b is first in
    # line, but has waited less than BYPASS_S, and a fits now).
    with gate.reserve(15 * GB, 25 * GB, owner="a"):
        assert "a" not in gate.reserved()["standing"]
    release_c.set()
    c.join(10)
    b.join(10)
    assert windows["b"]["wait_s"] > 0.4
    with gate.reserve(GB, 25 * GB, owner="d") as reservation:
        reservation.standing_after = 3 * GB
    gate.forget("d")
    assert "d" not in gate.reserved()["standing"]


def test_a_spare_worker_counts_as_standing_memory_until_its_candidate_reserves(tmp_path):
    """An Evaluator forks its next worker between candidates (kbencheval/eval/processes/launch.py): that worker's
    CUDA context stands beside the judge's memory, holding back others' candidates until its own
    candidate's reservation covers it."""
    import os

    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    gate.stand("a", 6 * GB)  # judge 5 GB + the spare's context 1 GB
    assert gate.reserved()["standing"] == {"a": [os.getpid(), 6 * GB]}
    windows = {"b": {}}
    with gate.reserve(5 * GB, 25 * GB, owner="c"):
        b = _reserve_in_background(gate, 15 * GB, 25 * GB, windows["b"], owner="b")
        assert "start" not in windows["b"]  # 5 held + 6 standing + 15 > 25
        with gate.reserve(5 * GB, 25 * GB, owner="a"):  # a's next candidate covers its standing now
            assert "a" not in gate.reserved()["standing"]
            b.join(10)  # 5 + 5 + 15 fit
            assert not b.is_alive() and windows["b"]["wait_s"] > 0.4
    # What kept b out at its last look, as its record tells a user who wonders why it waited.
    assert windows["b"]["blocked_by_gb"] == {"held": 5.0, "standing": 6.0, "early": 0.0, "position": 0,
                                             "holders": 1, "fits": False}


def _reserve_in_background(gate, nbytes: int, capacity: int, window: dict, owner: str) -> threading.Thread:
    """A reservation asked for (and given back at once) in a thread; returns it half a second later."""
    def reserve():
        with gate.reserve(nbytes, capacity, window, owner=owner):
            pass

    thread = threading.Thread(target=reserve)
    thread.start()
    time.sleep(0.5)
    return thread


def test_modelnew_is_built_at_the_first_request_not_before_ready():
    """The worker says Ready once its candidate is imported and compiled; ModelNew's constructor (candidate
    code that may take device memory) runs at the first request, after its memory reservation was admitted."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval import EvalConfig, Evaluator
    from kbencheval.eval import Status

    relu = next(p for p in load_bundled(1) if p.key == "L1_1_ReLU")
    head = "super().__init__()"
    assert head in relu.solution_source
    slow = relu.solution_source.replace(head, head + "\n        import time; time.sleep(1.5)", 1)
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False, timeout_s=60, static_checks=False,
                                accept_cpu_tripwires_only=True)) as ev:
        result = ev.evaluate(relu, "```python\n" + slow + "```")
        broken = ev.evaluate(relu, "```python\n" + relu.solution_source.replace(head, head + "; raise ValueError('no')", 1)
                             + "```")
    assert result.correct, result.error
    phases = result.checks["phases_s"]
    assert phases["build_s"] >= 1.5 and phases["load_s"] < 1.5
    start = result.checks["start_s"]  # the worker's start, its job's start by part (take) included
    assert set(start["job_init_parts_s"]) == {"problem_module_s", "tripwires_s", "audit_s"}
    assert 0 < sum(start["job_init_parts_s"].values()) <= start["job_init_s"], start
    assert result.checks["harness_s"]["start"]["worker_s"] < 1.5 <= result.checks["harness_s"]["trials"]["worker_s"]
    assert broken.status == Status.COMPILE_ERROR and "ValueError: no" in broken.error, broken.error

