"""Sharing a device: what a candidate reserves on it (sizing.device_bytes_needed), what the judge keeps
cached, and how Evaluators on one device split its cores and timing memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from kbencheval.eval.contract.protocol import Trial


def test_a_candidate_reserves_what_its_reference_needs_on_the_device():
    from kbencheval.eval import EvalConfig
    from kbencheval.eval.contract.judge_replies import Prepared
    from kbencheval.eval.sharing.sizing import CUDA_CONTEXT_BYTES, device_bytes_needed

    gb = 1 << 30
    cfg = EvalConfig(device="cuda", timing_input_gb=0.75, judge_cache_gb=1.0)
    relu = Prepared(output_bytes=[gb], input_bytes=gb, call_peak_bytes=2 * gb, model_bytes=0)
    tiny = Prepared(output_bytes=[1 << 20], input_bytes=1 << 20, call_peak_bytes=3 << 20, model_bytes=4 << 20)
    # worker and judge: context, a call's peak (inputs regenerated in place), flush; the worker's exported
    # trial outputs; the judge's snapshot of a timed output and its compare slices. No cached outputs: a
    # 1 GB output fills the judge's 1 GB share, and is recomputed for each comparison instead.
    assert device_bytes_needed(relu, cfg) == 2 * (CUDA_CONTEXT_BYTES + 2 * gb + (256 << 20)) + gb + gb + (256 << 20)
    # A problem whose timers copy fresh inputs (its get_inputs cannot be replayed as a graph): one more
    # input set on each side.
    assert device_bytes_needed(relu, cfg, copies_inputs=True) == device_bytes_needed(relu, cfg) + 2 * gb
    # With 8 GB of cache it keeps every trial's output (5 trials, 4 stress trials), and reserves them.
    roomy = dataclasses.replace(cfg, judge_cache_gb=8.0)
    assert device_bytes_needed(relu, roomy) == device_bytes_needed(relu, cfg) + 8 * gb
    assert device_bytes_needed(tiny, cfg) < 4 * gb  # dozens of small candidates fit an 80 GB device
    # A request of picked timed outputs holds all but the last as copies in the worker, beyond one trial's
    # outputs: 7 of 8 at 32 MB (6 more), 1 of 2 at 128 MB (none more); a 1 GB one is judged alone.
    from kbencheval.eval.sharing import sizing

    def reserved(output_mb: int, one_per_request: bool = False) -> int:
        prep = Prepared(output_bytes=[output_mb << 20], input_bytes=0, call_peak_bytes=0, model_bytes=0)
        with pytest.MonkeyPatch.context() as patch:
            if one_per_request:
                patch.setattr(sizing, "timed_outputs_per_request", lambda output_bytes: 1)
            return device_bytes_needed(prep, cfg)
    assert reserved(32) - reserved(32, one_per_request=True) == 6 * (32 << 20)
    assert reserved(128) == reserved(128, one_per_request=True) and reserved(1024) == reserved(1024, one_per_request=True)


def test_the_judge_caches_only_outputs_that_leave_room_for_four():
    from kbencheval.eval.trusted.judge import Judge
    from kbencheval.eval.contract.protocol import Prepare

    source = (Path(__file__).resolve().parents[2] / "kbencheval/problems/level1/1_ReLU.py").read_text()
    judge = Judge(torch.device("cpu"), cache_bytes=1024)
    trials = [Trial(seed=s) for s in range(6)]
    judge.prepare(Prepare(problem_source=source, sizes={"batch_size": 2, "dim": 32}, model_seeds={"init": 1, "model": 2},
                          trials=trials))
    assert len(judge.refs) == 4  # 256-byte outputs: kept until the cache is full
    judge.prepare(Prepare(problem_source=source, sizes={"batch_size": 2, "dim": 40}, model_seeds={"init": 1, "model": 2},
                          trials=trials))
    assert judge.refs == {}  # 320 bytes: four would not fit, so none is kept


def test_evaluators_sharing_the_cpu_split_its_cores(monkeypatch):
    from kbencheval.config import ConfigError
    from kbencheval.eval.config import EvalConfig, cpu_threads_per_evaluator

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert cpu_threads_per_evaluator(EvalConfig(), 14).cpu_threads == 1
    assert cpu_threads_per_evaluator(EvalConfig(), 4).cpu_threads == 4
    assert cpu_threads_per_evaluator(EvalConfig(), 1).cpu_threads == 0  # one Evaluator keeps every core
    assert cpu_threads_per_evaluator(EvalConfig(cpu_threads=3), 8).cpu_threads == 3  # an explicit choice wins
    with pytest.raises(ConfigError, match="cpu_threads"):
        EvalConfig(cpu_threads=-1).validate()


def test_evaluators_sharing_a_gpu_split_its_timing_memory():
    from kbencheval.eval.config import EvalConfig, device_memory_per_evaluator

    shared = device_memory_per_evaluator(EvalConfig(device="cuda:0", timing_input_gb=6.0, judge_cache_gb=8.0), 4)
    assert (shared.timing_input_gb, shared.judge_cache_gb) == (1.5, 2.0)
    assert device_memory_per_evaluator(EvalConfig(device="cuda:0", timing_input_gb=6.0), 1).timing_input_gb == 6.0
    assert device_memory_per_evaluator(EvalConfig(device="cpu", timing_input_gb=6.0), 4).timing_input_gb == 6.0
