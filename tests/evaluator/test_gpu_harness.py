"""The evaluator on a real GPU: timing, CUDA IPC transfer, and the attacks only a GPU can stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval import Status
from kbencheval.eval.sharing.rounds import round_sizes
from tests.support import another_reservation, out_of_memory_once
from tests.adversarial.test_adversarial import RELU, candidate

pytestmark = pytest.mark.gpu


def test_solution_is_correct_and_timed(gpu_eval):
    result = gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    assert result.timing_meaningful and result.speedup > 0
    assert result.runtime_stats.n == 20 and result.ref_runtime_stats.n == 20
    assert "cuda" in result.device
    ran = result.checks["device_kernels"]  # the graph the timed loop replayed: one node, the solution's kernel
    assert ran["source"] == "graph" and ran["kernels"] == {"relu_kernel": 1}, ran


def test_the_candidates_kernels_compile_before_its_first_trial(gpu_eval):
    """worker.precompile: ModelNew called once on meta tensors compiles relu_kernel before Ready, so the
    trials compile nothing; the timed kernel is still the candidate's own."""
    result = gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    assert result.checks["precompile"]["outcome"] == "ran" and result.checks["precompile"]["kernels"] == 1
    assert result.checks["precompile"]["loading_s"] > 0  # its launcher and module, before the trials too
    assert result.checks.get("compiles_aside", {}).get("count", 0) == 0, result.checks.get("compiles_aside")
    assert result.checks["device_kernels"]["kernels"] == {"relu_kernel": 1}


def test_a_launcher_built_by_the_harness_serves_the_next_candidate(gpu_eval):
    """launchers.py: a worker reports its kernel's argument types, the harness builds that launcher, and
    the next candidate with the same types loads it instead of running the compiler (0.16 s or more on the H100)."""
    from kbencheval.eval.sharing.launchers import launcher_source, shared_builder

    leaky = next(p for p in load_bundled(1) if p.problem_id == 4)
    first = gpu_eval.evaluate(leaky, "```python\n" + leaky.solution_source + "```")
    shared_builder().drain()
    second = gpu_eval.evaluate(leaky, "```python\n" + leaky.solution_source + "```")
    assert first.status == second.status == Status.CORRECT, (first.error, second.error)
    [types] = first.checks["precompile"]["launchers"]
    assert (Path(shared_builder().folder) / launcher_source(tuple(types))[1]).is_dir()
    assert second.checks["precompile"]["loading_s"] < 0.05, (first.checks["precompile"], second.checks["precompile"])


def test_a_kernel_compiled_by_the_harness_serves_the_next_candidate(gpu_eval):
    """kernel_cache.py: a worker reports its kernel's TTIR, the harness compiles it in its own sandboxed
    child, and the next candidate with the same kernel loads that instead of compiling; still correct."""
    from kbencheval.eval.sharing.kernel_cache import shared_compiler

    leaky = next(p for p in load_bundled(1) if p.problem_id == 4)
    first = gpu_eval.evaluate(leaky, "```python\n" + leaky.solution_source + "```")
    gpu_eval.drain_compiles()
    second = gpu_eval.evaluate(leaky, "```python\n" + leaky.solution_source + "```")
    assert first.status == second.status == Status.CORRECT, (first.error, second.error)
    assert "kernel_sources" not in first.checks["precompile"]  # the TTIR stays out of the verdict
    assert gpu_eval.kernel_compiler is shared_compiler(None, 0) and gpu_eval.kernel_compiler.failures == 0
    assert second.checks["precompile"]["kernels_cached"] == 1, (first.checks["precompile"], second.checks["precompile"])
    assert second.checks["device_kernels"]["kernels"] == first.checks["device_kernels"]["kernels"]


def test_the_judge_keeps_its_free_blocks_between_one_candidates_comparisons_only():
    """Compare.trim: the judge's blocks from one comparison serve the next (1 GB inputs and outputs, not
    freed and allocated again per trial); its last comparison gives them back."""
    replies = []
    # No cache of reference outputs: each comparison computes its reference, as 8 Evaluators' judges do.
    with Evaluator(EvalConfig(device="cuda", iters=20, timeout_s=120, judge_cache_gb=0.0)) as ev:
        call = ev.judge_call

        def recording(msg):
            reply = call(msg)
            replies.append((type(msg).__name__, getattr(msg, "phase", ""), getattr(msg, "trim", None),
                            reply.reserved_bytes or 0))
            return reply

        ev.judge_call = recording
        result = ev.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    prepared = next(kept for name, _, _, kept in replies if name == "Prepare")
    trials = [kept for name, phase, trim, kept in replies if phase == "trials" and trim is False]
    picks = [(trim, kept) for name, phase, trim, kept in replies if phase == "timed_outputs"]
    assert trials and min(trials) > prepared + (1 << 30), (prepared, trials)  # a 1 GB input set kept
    assert [trim for trim, _ in picks] == [False] * (len(picks) - 1) + [True]
    assert picks[-1][1] < max(kept for _, kept in picks[:-1]) - (1 << 30), picks


# Loading this candidate takes seconds of CPU (its import), as a slow compile would.
SLOW_TO_LOAD = RELU.solution_source.replace(
    "class ModelNew", "_table = sum(i * i for i in range(30_000_000))\n\n\nclass ModelNew", 1)


def test_a_candidates_memory_is_reserved_only_once_it_is_loaded_and_compiled(gpu_eval):
    """Its worker gets the job when the reservation is registered, and the reservation joins the line
    once the worker is Ready: the seconds of import and compile hold no device memory."""
    assert SLOW_TO_LOAD != RELU.solution_source
    result = gpu_eval.evaluate(RELU, "```python\n" + SLOW_TO_LOAD + "```")
    assert result.status == Status.CORRECT, result.error
    memory, load_s = result.checks["device_gate"]["memory"], result.checks["phases_s"]["load_s"]
    assert load_s > 1.0, result.checks["phases_s"]
    assert memory["ready_after_s"] > load_s and memory["start"] - memory["worker_started"] > load_s, memory


AUTOTUNED = RELU.solution_source.replace("@triton.jit\n", """@triton.autotune(configs=[triton.Config({"BLOCK": 1024}),
                               triton.Config({"BLOCK": 2048}), triton.Config({"BLOCK": 4096})], key=["n_elements"])
@triton.jit
""").replace("        block = 4096\n", "").replace(
    "relu_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)",
    "relu_kernel[lambda meta: (triton.cdiv(n, meta['BLOCK']),)](x, y, n)")


def test_an_autotuned_kernel_compiles_every_config_before_its_first_trial_and_tunes_there(gpu_eval):
    """Dry, the autotuner compiles its three configs and chooses none (a choice from launches that ran
    nothing would stick); the first trial times them for real, without compiling."""
    assert "autotune" in AUTOTUNED and "BLOCK=block" not in AUTOTUNED
    result = gpu_eval.evaluate(RELU, "```python\n" + AUTOTUNED + "```")
    assert result.status == Status.CORRECT, result.error
    assert result.checks["precompile"] == {**result.checks["precompile"], "outcome": "ran", "kernels": 3}
    assert result.checks.get("compiles_aside", {}).get("count", 0) == 0, result.checks.get("compiles_aside")


# A forward that will not run on meta tensors: its kernel compiles in the first trial, as without precompile.
REAL_TENSORS_ONLY = RELU.solution_source.replace(
    "        x = x.contiguous()\n", "        assert not x.is_meta\n        x = x.contiguous()\n")


def test_the_candidates_triton_compile_runs_with_the_device_let_go(gpu_eval):
    """relu_kernel compiles at the first trial's first launch (each worker has its own cache): the
    harness lets go of the trial's hold for it and takes the device again before the launch."""
    assert REAL_TENSORS_ONLY != RELU.solution_source
    result = gpu_eval.evaluate(RELU, "```python\n" + REAL_TENSORS_ONLY + "```")
    assert result.status == Status.CORRECT, result.error
    assert result.checks["precompile"]["outcome"] == "stopped (AssertionError)", result.checks["precompile"]
    aside = result.checks["compiles_aside"]
    assert aside["count"] >= 1 and aside["device_let_go"] >= 1 and aside["seconds"] > 0, aside
    trials = result.checks["device_gate"]["trials"]
    compared = len(result.checks["correctness_trials"])
    # One hold per trial, one for the last one's comparison, and one more after each compile let go of it.
    assert len(trials["holds"]) == compared + 1 + aside["device_let_go"], (trials["holds"], aside)


def test_the_worker_starts_while_its_memory_reservation_waits(gpu_eval):
    """Another Evaluator holds the whole device for 3 s: the candidate's worker is started meanwhile
    (fork, CUDA context, import) and runs once the reservation is admitted."""
    from kbencheval.eval.sharing.gate import DeviceGate

    with another_reservation(DeviceGate("cuda:0"), 1 << 50, 1 << 50, seconds=3.0):  # everything: ours must wait
        result = gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    memory = result.checks["device_gate"]["memory"]
    assert memory["wait_s"] > 1.5 and memory["worker_started"] < memory["start"] - 1.5, memory
    assert memory["ready_after_s"] < memory["wait_s"], memory  # ready, then it waited in line


def test_a_candidate_that_ran_out_of_device_memory_is_run_again_once_every_reservation_has_ended(gpu_eval, monkeypatch):
    """The re-run after a device OOM waits for the other Evaluators' reservations to end: their memory,
    not their device work, ran the first run out (an honest LogSoftmax on the H100, eight Evaluators)."""
    from kbencheval.eval.sharing.gate import DeviceGate
    from kbencheval.eval.contract.protocol import Compare

    compares: list = []
    monkeypatch.setattr(gpu_eval, "judge_call", out_of_memory_once(gpu_eval.judge_call, Compare, compares))
    # another Evaluator's candidate: 1 GiB, small enough for ours to run beside it
    with another_reservation(DeviceGate("cuda:0"), 1 << 30, 1 << 50, seconds=4.0) as released:
        result = gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    assert "device_oom_retry" in result.checks
    assert released and compares[1] > released[0]  # the re-run's trials ran after the other's memory was let go
    assert result.checks["device_gate"]["memory"]["wait_s"] > 1.0, result.checks["device_gate"]["memory"]


def test_the_next_candidate_gets_a_worker_forked_before_it_was_known(gpu_eval):
    """launch.py: after a candidate, its Evaluator forks the next one's worker (CUDA context, imports)."""
    gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    forked = gpu_eval.spare_forked_at()
    assert forked is not None
    result = gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    memory = result.checks["device_gate"]["memory"]
    assert memory["worker_forked"] == forked < memory["worker_started"], memory


def test_workers_and_judges_sleep_while_they_wait_for_the_device():
    """forkserver.block_while_waiting: the primary context is made with blocking sync, not spinning."""
    import subprocess
    import sys

    probe = ("from kbencheval.eval.processes.forkserver import block_while_waiting; block_while_waiting('cuda:0'); "
             "import ctypes, torch; torch.zeros(1, device='cuda:0'); cuda = ctypes.CDLL('libcuda.so.1'); "
             "flags = ctypes.c_uint(); assert cuda.cuCtxGetFlags(ctypes.byref(flags)) == 0; print(flags.value)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) & 0x04, out.stdout  # CU_CTX_SCHED_BLOCKING_SYNC


def test_cuda_graph_mode():
    with Evaluator(EvalConfig(device="cuda", iters=20, timing_mode="cuda_graph")) as ev:
        result = ev.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert result.status == Status.CORRECT and result.speedup > 0, result.error
    assert result.checks["device_kernels"]["source"] == "graph", result.checks["device_kernels"]
    assert result.checks["timing_mode"]["reward_grade"] is False  # comparison-only (test_timing_grade.py)


def test_behaves_during_checks_then_stops_working(gpu_eval):
    """Honest for the correctness trials, then replays a stale output: caught after timing."""
    code = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = []
            def forward(self, x):
                self.calls.append(1)
                if len(self.calls) <= 5 or not hasattr(self, "last"):
                    y = torch.empty_like(x)
                    launch_relu(x, y)
                    self.last = y
                    return y
                scratch = torch.empty_like(x)
                launch_relu(x[:1], scratch[:1])
                return self.last
        """
    result = gpu_eval.evaluate(RELU, candidate(code))
    assert result.status in (Status.INCORRECT, Status.REJECTED), result.error


def test_a_worker_that_exits_while_the_judge_reads_its_last_trial_leaves_the_judge_working(gpu_runtime_only):
    """The judge compares a trial while the worker runs the next (Session.run_trials): here the worker exits
    in its second trial, its memory freed under the judge's mapping of the first one's outputs. The
    verdict is the crash, and the same Evaluator's judge then passes an honest candidate."""
    code = """
        import os

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = 0
            def forward(self, x):
                self.calls += 1
                if self.calls == 2:  # its second trial (the precompile calls an instance of its own)
                    os._exit(7)
                y = torch.empty_like(x)
                launch_relu(x, y)
                return y
        """
    for _ in range(3):  # the exit and the judge's reading race: a few turns
        crashed = gpu_runtime_only.evaluate(RELU, candidate(code))
        assert crashed.status == Status.RUNTIME_ERROR, (crashed.status, crashed.error)
        honest = gpu_runtime_only.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
        assert honest.status == Status.CORRECT, honest.error


def test_side_stream_at_run_time(gpu_runtime_only):
    code = """
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                with torch.cuda.stream(torch.cuda.Stream()):
                    launch_relu(x, y)
                return y
        """
    result = gpu_runtime_only.evaluate(RELU, candidate(code))
    assert result.status == Status.REJECTED and "side stream" in result.error


def test_stale_reference_output_during_timing(gpu_eval):
    """Honest for the checked calls, then returns fresh-but-unwritten memory, hoping it still holds the
    output the reference just computed: timed calls get other inputs than the reference's, and
    spot-checked timed outputs go to the judge."""
    code = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = []
            def forward(self, x):
                self.calls.append(1)
                y = torch.empty_like(x)
                if len(self.calls) <= 5:
                    launch_relu(x, y)
                else:
                    launch_relu(x[:1], y[:1])
                return y
        """
    result = gpu_eval.evaluate(RELU, candidate(code))
    assert result.status in (Status.INCORRECT, Status.REJECTED), result.error


def test_level2_allowed_conv(gpu_eval):
    problem = next(p for p in load_bundled(2) if p.allowed_torch_ops)
    result = gpu_eval.evaluate(problem, "```python\n" + problem.solution_source + "```")
    assert result.status == Status.CORRECT, result.error


# --- trusted timing (issue #17) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_events():
    with Evaluator(EvalConfig(device="cuda", iters=20, timeout_s=120, timing_mode="events")) as ev:
        yield ev


def test_trusted_timing_is_the_default_and_says_how_it_measured(gpu_eval, gpu_events):
    text = "```python\n" + RELU.solution_source + "```"
    trusted, eager = gpu_eval.evaluate(RELU, text), gpu_events.evaluate(RELU, text)
    assert trusted.status == eager.status == Status.CORRECT, (trusted.error, eager.error)
    assert "cuda_graph in its worker" in trusted.checks["timing_trust"]
    for result, source in ((trusted, "graph"), (eager, "profiler")):  # events mode profiles one extra call
        ran = result.checks["device_kernels"]
        assert ran["source"] == source and "relu_kernel" in ran["kernels"], ran
    assert "judge" in trusted.checks["timing_trust"] and trusted.checks["physical_floor_us"] > 0
    # Two judged timed outputs per round (iters=20: eight in all).
    assert len(trusted.checks["correctness_timed_outputs"]) == 2 * len(trusted.checks["timing_rounds"]) == 2 * len(round_sizes(20))
    assert "untrusted" in eager.checks["timing_trust"]
    assert trusted.checks["timing_mode"] == {"mode": "trusted", "reward_grade": True}
    assert eager.checks["timing_mode"]["reward_grade"] is False
    # A memory-bound ReLU: graph replay and eager events agree within launch overhead.
    assert 0.5 < trusted.speedup / eager.speedup < 2.0, (trusted.speedup, eager.speedup)


def test_small_timed_outputs_are_recomputed_and_judged_in_one_request(gpu_eval):
    """An 8 MB output: all eight picked timed outputs in one request (rounds.timed_outputs_per_request),
    seven of them copies exported through CUDA IPC beside the timer's own buffer, each judged against
    its round's digest."""
    mlp = next(p for p in load_bundled(3) if p.problem_id == 1)
    result = gpu_eval.evaluate(mlp, "```python\n" + mlp.solution_source + "```")
    assert result.status == Status.CORRECT, result.error
    assert len(result.checks["correctness_timed_outputs"]) == 2 * len(result.checks["timing_rounds"]) == 8
    assert len(result.checks["device_gate"]["timed_outputs"]["holds"]) == 1


def test_host_sync_in_forward_is_timed_eagerly_and_labelled(gpu_eval):
    code = """
        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                launch_relu(x, y)
                torch.cuda.synchronize()      # not capturable
                return y
        """
    result = gpu_eval.evaluate(RELU, candidate(code))
    assert result.status == Status.CORRECT, result.error
    assert "eager (cannot capture" in result.checks["timing_trust"]
    ran = result.checks["device_kernels"]  # profiled at setup and after each round
    rounds = len(result.checks["timing_rounds"])
    assert ran["source"] == "profiler" and ran["kernels"].get("relu_kernel") == 1 + rounds, ran


def test_side_stream_outside_the_checked_calls(gpu_runtime_only, gpu_eval):
    """Honest on the checked calls, then launches on a side stream, hoping the events miss its work."""
    code = """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.calls = []
            def forward(self, x):
                self.calls.append(1)
                y = torch.empty_like(x)
                if len(self.calls) <= 8:
                    launch_relu(x, y)
                else:
                    with torch.cuda.stream(torch.cuda.Stream()):
                        launch_relu(x, y)
                return y
        """
    honest = gpu_eval.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    result = gpu_runtime_only.evaluate(RELU, candidate(code))
    assert not (result.correct and result.speedup > 1.5 * honest.speedup), (result.status, result.speedup, result.error)


@pytest.mark.parametrize("name", ["forged_timing_figures", "wrong_only_when_timed", "forged_ready_and_empty_outputs"])
def test_trust_attacks_on_the_gpu(gpu_eval, gpu_runtime_only, name):
    from tests.adversarial.test_adversarial_trust import ATTACKS, HEADER

    _, problem, code, on, off, _ = ATTACKS[name]
    code = code if "import triton" in code else HEADER + code
    for ev, allowed in ((gpu_eval, on), (gpu_runtime_only, off | {Status.INCORRECT, Status.REJECTED})):
        result = ev.evaluate(problem, "```python\n" + code + "\n```")
        assert not result.correct and result.status in allowed, (name, result.status, result.error)
        assert ev.evaluate(RELU, "```python\n" + RELU.solution_source + "```").correct
