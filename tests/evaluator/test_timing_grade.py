"""Timing modes that hold for rewards: `events` and `cuda_graph` time the candidate inside its own worker
(a kernel lazy on 7 of 8 graph replays was `correct` at 8.6x under cuda_graph), so they are comparison-only:
refused wherever a verdict becomes a reward, and labelled in the verdict, `kbench check` and `kbench report`."""

from __future__ import annotations

import json

import pytest

from kbencheval.config import ConfigError, load_config
from kbencheval.eval.config import EvalConfig, timing_grade
from kbencheval.eval import EvalResult, Status, TimingStats
from smart.config import RewardConfig


@pytest.mark.parametrize("mode", ["events", "cuda_graph"])
def test_reward_config_refuses_comparison_only_timing(mode):
    with pytest.raises(ConfigError, match=f"reward.eval.timing_mode={mode} is comparison-only.*"
                                          "set reward.eval.timing_mode=trusted"):
        load_config(RewardConfig, None, [f"eval.timing_mode={mode}", "eval.device=cuda"])
    RewardConfig(eval=EvalConfig(device="cuda", timing_mode=mode, timing=False)).validate()  # untimed: no figures
    RewardConfig(eval=EvalConfig(device="cuda")).validate()


def test_eval_pool_refuses_before_starting_a_worker():
    from smart.reward.pool import reward_pool

    class NeverStarted:
        @staticmethod
        def options(**_):
            raise AssertionError("a worker was started")

    cfg = RewardConfig(eval=EvalConfig(device="cuda"))
    cfg.eval.timing_mode = "cuda_graph"  # set after validation, as code building the pool by hand might
    with pytest.raises(ConfigError, match="comparison-only"):
        reward_pool(cfg, actor_cls=NeverStarted)


def graph_timed(mode: str) -> EvalResult:
    return EvalResult(Status.CORRECT, problem="L1_1_ReLU", compiled=True, correct=True, speedup=8.6,
                      runtime_stats=TimingStats.of([1.0, 1.2]), ref_runtime_stats=TimingStats.of([8.6, 9.0]),
                      timing_meaningful=True, device="cuda:0", checks={"timing_mode": timing_grade(mode)})


def test_a_comparison_only_verdict_is_never_a_reward():
    from smart.reward.presets import shaped_reward

    with pytest.raises(ValueError, match="timing_mode=cuda_graph is comparison-only"):
        shaped_reward(graph_timed("cuda_graph"), RewardConfig())
    assert shaped_reward(graph_timed("trusted"), RewardConfig(preset="kevin")) == pytest.approx(8.9)


def test_kbench_check_labels_comparison_only_timing(capsys):
    from kbencheval.eval.cli.check import print_human

    print_human(graph_timed("events"))
    assert "timing_mode=events: comparison-only, not reward-grade" in " ".join(capsys.readouterr().out.split())
    print_human(graph_timed("trusted"))
    out = capsys.readouterr().out
    assert "comparison-only" not in out and "not meaningful" not in out and "speedup" in out


def test_kbench_report_labels_comparison_only_timing(tmp_path):
    from kbencheval.bench.report import build_report, comparison_only_note, print_tables

    run = tmp_path / "r"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"run_name": "r"}))
    keys = {"level": 1, "problem_id": 1, "problem_key": "L1_1_ReLU"}
    lines = [json.dumps({**keys, "sample": i, **graph_timed(mode).to_dict()}) for i, mode in enumerate(
        ["cuda_graph", "cuda_graph", "trusted"])]
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    report = build_report(run)
    assert report["timing_modes"] == {"cuda_graph": {"n": 2, "reward_grade": False},
                                      "trusted": {"n": 1, "reward_grade": True}}
    assert comparison_only_note(report).startswith("timed with timing_mode=cuda_graph (2 samples): comparison-only")
    print_tables(report)  # the note is printed beside the tables (rich, on stdout)
