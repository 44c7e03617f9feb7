"""The learning pipeline (scripts/run_learning.sh) end to end at toy size on CPU: every stage's outputs
exist and carry metrics. It checks the machinery (real Ray, SFT, GRPO, evaluator, plots), not learning."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import ENV, REPO


@pytest.mark.slow
def test_run_learning_produces_every_stage(tmp_path):
    run = tmp_path / "learn"
    proc = subprocess.run(["bash", "scripts/run_learning.sh", "configs/learn_synth_cpu.yaml", str(run)],
                          cwd=REPO, env={**ENV, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]

    manifest = json.loads((run / "synth" / "manifest.json").read_text())
    assert manifest["counts"]["train"] >= 1 and manifest["counts"]["heldout"] >= 1
    assert manifest["stats"]["verified"] is True
    for folder in ("base", "sft/hf", "rl/hf"):
        assert (run / folder / "config.json").is_file(), folder
    assert list((run / "rl" / "rollouts").glob("step_*.jsonl"))

    for phase in ("sft", "rl"):
        report = json.loads((run / "evals" / f"heldout_{phase}.json").read_text())
        assert report["summary"]["all"]["n_samples"] == 4  # 2 held-out problems x 2 samples
        assert report["model"].endswith(f"{phase}/hf")

    summary = json.loads((run / "plots" / "summary.json").read_text())
    assert {"sft_loss.png", "rl_reward.png", "tokens_per_s.png", "heldout.png"} <= set(summary["plots"])
    for name in summary["plots"]:
        assert (run / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    assert set(summary["heldout"]) == {"after SFT", "after RL"}
    assert {"synth", "model", "sft", "rl", "eval_sft", "eval_rl"} <= set(summary["stage_seconds"])
