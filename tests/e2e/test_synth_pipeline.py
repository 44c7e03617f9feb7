"""The learning pipeline (scripts/run_learning.sh) end to end at toy size on CPU: every stage's outputs
exist and carry metrics. It checks the machinery (real Ray, SFT, GRPO, evaluator, plots), not learning."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from tests.support import ENV, REPO


def _seconds(clock: str) -> int:
    h, m, s = map(int, clock.split(":"))
    return 3600 * h + 60 * m + s


@pytest.mark.slow
def test_run_learning_produces_every_stage(tmp_path):
    run = tmp_path / "learn"
    proc = subprocess.run(["bash", "scripts/run_learning.sh", "configs/learn_synth_cpu.yaml", str(run)],
                          cwd=REPO, env={**ENV, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]

    manifest = json.loads((run / "synth" / "manifest.json").read_text())
    assert min(manifest["counts"][s] for s in ("train", "test", "heldout")) > 0
    assert manifest["stats"]["verified"] is True and max(p["num_ops"] for p in manifest["problems"]) <= 3
    for folder in ("base", "sft/hf", "rl/hf", "sft_continued/hf", "rl_lr3e-4/hf"):
        assert (run / folder / "config.json").is_file(), folder
    assert list((run / "rl" / "rollouts").glob("step_*.jsonl"))
    # rl_pool: 2: GRPO drew only from the pool, and SFT never saw those problems
    pool = {f"L1_{p.stem}" for p in (run / "synth" / "rl_pool" / "level1").glob("*.py")}
    drawn = {json.loads(line)["problem_key"] for f in (run / "rl" / "rollouts").glob("step_*.jsonl")
             for line in f.read_text().splitlines() if line.strip()}
    seen_by_sft = {json.loads(line)["problem"] for line in
                   (run / "synth" / "sft_train_minus_rl_pool.jsonl").read_text().splitlines()}
    assert len(pool) == 2 and drawn and drawn <= pool and not pool & seen_by_sft and seen_by_sft

    # SFT and RL: the test split sampled (2 problems x 2) and greedy (x 1), the unseen-pair split (2 x 1);
    # the control and the ablation: the test split sampled, which their comparisons use
    for phase in ("sft", "rl", "sft_continued", "rl_lr3e-4"):
        full = phase in ("sft", "rl")
        for name, n in ((f"test_{phase}", 4), (f"test_{phase}_greedy", 2), (f"heldout_{phase}", 2)):
            path = run / "evals" / f"{name}.json"
            assert path.is_file() == (full or name == f"test_{phase}"), name
            if path.is_file():
                report = json.loads(path.read_text())
                assert report["summary"]["all"]["n_samples"] == n, name
                assert report["model"].endswith(f"{phase}/hf")
    # lanes: 1: the side lane (the SFT model's multi-turn evaluation, then the ablation's GRPO) follows the main
    # lane (GRPO, its evaluations, continued SFT). lanes: 2 ran them side by side here, and under that load a
    # fork server now and then reported pid-ns missing and refused to evaluate (3 of 8 runs): not for CI yet.
    took = dict(line.split() for line in (run / "stage_seconds.txt").read_text().splitlines())
    started = {name: _seconds(clock) for clock, name in re.findall(r"^== (\d\d:\d\d:\d\d) (\S+)$", proc.stderr, re.M)}
    assert started["multiturn_sft"] >= started["sft_continued"] + int(took["sft_continued"]) - 1
    assert started["rl_lr3e-4"] >= started["multiturn_sft"] + int(took["multiturn_sft"]) - 1
    ablation = yaml.safe_load((run / "config" / "rl_lr3e-4.yaml").read_text())
    assert (ablation["train"]["lr"], ablation["train"]["dtype"]) == (3.0e-4, "fp32")
    assert ablation["out_dir"] == str(run / "rl_lr3e-4")
    # SFT and RL: a 2-turn evaluation with the evaluator's feedback on the evaluations' 2 test problems x 2
    for phase in ("sft", "rl"):
        turns = json.loads((run / "evals" / f"multiturn_{phase}.json").read_text())
        assert (turns["problems"], turns["trajectories"]) == (2, 4)
        first = turns["by_turn"]["turn 1"]
        assert first["reached"] == 4 and 0 <= first["solved_by_turn"] <= 1
        if turns["max_turns"] == 2:  # a second turn only for what the first did not solve
            assert turns["by_turn"]["turn 2"]["reached"] == round(4 * (1 - first["solved_by_turn"]))
        assert set(turns["by_operators"]) <= {"1", "2", "3"}
    # the evaluations generate in fp32, the dtype the GRPO model was trained and saved in
    generated = json.loads((run / "evals" / "test_rl" / "manifest.json").read_text())
    assert generated["config"]["engine_dtype"] == "float32"

    # SFT ran in chunks of 2 steps up to 3, a test-split probe after each (a toy model never reaches the bar),
    # on a test problem the evaluations do not use; the control resumed it for GRPO's 2 optimizer steps
    assert [line.split()[0] for line in (run / "sft" / "probes.txt").read_text().splitlines()] == ["2", "3"]
    assert (run / "sft" / "stopped_at").read_text().strip() == "3"
    probe = json.loads((run / "evals" / "test_sft_probe_3.json").read_text())
    evaluated = {p["problem_key"] for p in json.loads((run / "evals" / "test_sft.json").read_text())["problems"]}
    assert probe["summary"]["all"]["n_samples"] == 2 and not {p["problem_key"] for p in probe["problems"]} & evaluated
    assert sorted((run / "sft_continued" / "checkpoints").glob("step_*"))[-1].name == "step_000005"

    summary = json.loads((run / "plots" / "summary.json").read_text())
    assert {"sft_loss.png", "rl_reward.png", "tokens_per_s.png", "test.png", "heldout.png"} <= set(summary["plots"])
    for name in summary["plots"]:
        assert (run / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    assert set(summary["test"]) == {"after SFT", "after SFT, greedy", "after RL", "after RL, greedy",
                                    "SFT continued (control)", "RL, rl_lr3e-4"}
    assert [step for step, _ in summary["sft_probes"]] == [2, 3]
    assert {"synth", "model", "sft_to_2", "sft_to_3", "rl", "eval_test_sft", "eval_test_rl", "sft_continued"} <= set(
        summary["stage_seconds"])
    compare = json.loads((run / "plots" / "compare.json").read_text())
    change = compare["test"]["pass@1: rl - sft"]
    assert change["n"] == 2 and change["lo"] <= change["diff"] <= change["hi"]
    assert {"pass@2", "pass@1: rl_lr3e-4 - sft", "pass@1: rl_lr3e-4 - rl"} <= set(compare["test"])
    _check_over_training(run, compare, summary)
    _check_report_page(run, tmp_path, change)
    assert set(compare["test"]["pass@1 by operators"]) <= {"2", "3"}


def _check_over_training(run, compare: dict, summary: dict) -> None:
    """rl.export_hf_every: 1: the policy after GRPO's first step, evaluated in the side lane on the test split, sampled
    and greedy (not on the unseen-pair split), paired with SFT only."""
    assert sorted(p.name for p in (run / "rl" / "hf_steps").iterdir()) == ["step_000001"]
    during = json.loads((run / "evals" / "test_rl_step1.json").read_text())
    assert during["summary"]["all"]["n_samples"] == 4 and during["model"].endswith("rl/hf_steps/step_000001")
    greedy = json.loads((run / "evals" / "test_rl_step1_greedy.json").read_text())
    assert greedy["summary"]["all"]["n_samples"] == 2 and greedy["model"].endswith("rl/hf_steps/step_000001")
    assert not (run / "evals" / "heldout_rl_step1.json").exists()
    assert "pass@1: rl_step1 - sft" in compare["test"] and "pass@1: rl_step1 - rl" not in compare["test"]
    assert "greedy pass@1: rl_step1 - sft" in compare["test"]
    assert [point[0] for point in summary["test_over_training"]] == [0, 1, 2]
    assert [point[0] for point in summary["test_greedy_over_training"]] == [0, 1, 2]
    assert "test_over_training.png" in summary["plots"]


def _check_report_page(run, tmp_path, change: dict) -> None:
    """The report page is written from the run's own outputs, between its markers, twice without growing."""
    doc = tmp_path / "docs" / "learning.md"
    doc.parent.mkdir()
    doc.write_text("# Does the loop learn?\n\nhistory stays\n")
    for _ in range(2):
        made = subprocess.run([sys.executable, "scripts/learning_report.py", str(run), "--doc", str(doc)], cwd=REPO,
                              env=ENV, capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
    text = doc.read_text()
    assert text.count("<!-- learning_report:begin -->") == 1 and text.endswith("history stays\n")
    assert f"| pass@1: rl - sft | {100 * change['diff']:+.1f} [" in text and "| turn 2 |" in text
    assert f"bash scripts/run_learning.sh configs/learn_synth_cpu.yaml {run}\n" in text  # the command as run
    assert "test pass@1 after GRPO - after SFT >= +15 points" in text and "![test.png](learning/learn/test.png)" in text
    assert (doc.parent / "learning" / "learn" / "compare.json").is_file()
    styles = "| checkpoint | style | share of samples | pass@1 | failed samples |\n"  # learning_compare's per style
    assert styles in text and "| sft | " in text
