"""The evaluator benchmarks' own arithmetic, on synthetic records (the runs themselves need a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "probes"))

import gpu_busy_by_window  # noqa: E402


def test_gpu_samples_are_attributed_to_the_gate_window_they_fall_in():
    # One candidate from t=10 to t=13: trials 10.0-11.0, timing 11.5-12.0; the rest of it is "outside".
    run = {"monotonic_span": [10.0, 13.0],
           "gate_s": {"memory": {"holds": [[10.0, 13.0]]}, "trials": {"holds": [[10.0, 11.0]]},
                      "timing": {"holds": [[11.5, 12.0]]}}}
    # A sample stands for the 100 ms before it was read: these stand for 10.0-10.1, 10.1-10.2, ...
    middles = [10.05 + 0.1 * k for k in range(35)]
    samples = [[t + 0.05, 100 if 11.5 < t < 12.0 else 20] for t in middles]
    table = gpu_busy_by_window.attribute({"problems": [{"pass1": run}], "gpu_samples": [samples]})
    wall = {window: round(v[0], 2) for window, v in table.items()}
    busy = {window: round(v[1], 2) for window, v in table.items()}
    assert wall == {"trials": 1.0, "outside": 1.5, "timing": 0.5, "between candidates": 0.5}
    assert busy == {"trials": 0.2, "outside": 0.3, "timing": 0.5, "between candidates": 0.1}


def test_gate_timeline_splits_a_pass_into_timing_shared_work_and_drains():
    """Two candidates: B checks over [0, 4] while A's timer waits from 1 to 3 and times over [3, 5]: of the
    timer's 2 s wait all is drain (no exclusive hold ran), filled by B's trials; 0.5 s nothing was held."""
    import gate_timeline

    a = {"monotonic_span": [0.0, 5.5], "gate_s": {"timing": {"wait_s": 2.0, "holds": [[3.0, 5.0]]}}}
    b = {"monotonic_span": [0.0, 4.0], "gate_s": {"trials": {"holds": [[0.0, 1.5], [1.5, 3.0]]}}}
    s = gate_timeline.pass_summary([a, b])
    assert (s["span_s"], s["exclusive_s"], s["shared_only_s"], s["nothing_held_s"]) == (5.5, 2.0, 3.0, 0.5)
    assert (s["timers_waiting_s"], s["draining_s"], s["hold_s_in_drains"]["trials"]) == (2.0, 2.0, 2.0)


def test_the_ledger_gap_is_what_the_gpu_holds_beyond_the_ledgers_count(tmp_path, monkeypatch):
    """One reservation of 10 GB held and 3 GB standing while the GPU holds 20 GB: 7 GB no one counted. A
    whole-device reservation (a candidate re-run alone) is not a memory figure and stays out of the gaps."""
    import ledger_vs_device_memory as probe

    from kbencheval.eval.sharing.gate import DeviceGate

    gate = DeviceGate("cuda:0", lock_dir=str(tmp_path))
    gate.stand("judge-a", 3 << 30)
    monkeypatch.setattr(probe, "used_gb", lambda index: 20.0)
    with gate.reserve(10 << 30, 70 << 30):
        row = probe.sample(gate, "0")
    assert (row["held_gb"], row["standing_gb"], row["gap_gb"], row["holders"], row["queued"]) == (10.0, 3.0, 7.0, 1, 0)
    alone = dict(row, held_gb=float(1 << 30), gap_gb=-1e9)
    later = dict(row, t=row["t"] + 2, gap_gb=-2.0)
    summary = probe.summarize([row, alone, later])
    assert (summary["gap_max_gb"], summary["gap_max_at_s"], summary["alone_samples"]) == (7.0, 0.0, 1)


def test_breakdown_means_the_parts_and_counts_the_ramp_and_tail():
    """Two Evaluators, three candidates over [0, 4]: A [0, 2], B [0, 3], C [2, 4]; fewer than two in
    flight over [3, 4] only. Means are over candidates; a missing part is left out of its mean."""
    import eval_harness_breakdown

    def row(span, wall, ready):
        return {"span_s": span, "wall_s": wall, "precompile": {"seconds": 0.5, "loading_s": 0.1},
                "gate_s": {"memory": {"wait_s": ready + 0.5, "held_s": 1.0, "ready_after_s": ready}},
                "worker_start_s": None}

    result = {"summary": {"evaluators_per_device": 2},
              "problems": [{"pass1": row([0, 2], 2.0, 0.3)}, {"pass1": row([0, 3], 3.0, 0.6)},
                           {"pass1": row([2, 4], 2.0, 0.9)}]}
    got = eval_harness_breakdown.breakdown(result)["pass1"]
    assert got["wall"] == 2.333 and got["ready_after"] == 0.6 and got["mem_wait"] == 1.1
    assert got["job_init"] is None and got["underfull"] == 1.0 and got["candidates"] == 3


def test_breakdown_refuses_a_file_that_is_not_a_result(tmp_path, capsys):
    import eval_harness_breakdown

    (tmp_path / "x.json").write_text('{"summary": {}}')
    assert eval_harness_breakdown.main([str(tmp_path / "x.json")]) == 2
    assert "is not an eval_harness.py result" in capsys.readouterr().err
