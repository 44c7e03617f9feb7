"""Every YAML in configs/ loads with the config class that reads it: a stale key fails here in
seconds, not in the slow tier or on a GPU (a moved `reward.timeout_s` once failed CI after 10 min)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kbencheval.config import load_config
from smart.config import RLConfig, SFTConfig

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def test_every_config_is_covered():
    assert CONFIGS and all(p.name.split("_")[0] in {"rl", "sft", "learn"} for p in CONFIGS)


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith(("rl_", "sft_"))], ids=lambda p: p.name)
def test_run_config_loads(path):
    cls = RLConfig if path.name.startswith("rl_") else SFTConfig
    load_config(cls, path, [])


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith("learn_")], ids=lambda p: p.name)
def test_learning_config_splits_and_validates(path, tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"), str(path), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "config" / "rl.yaml").is_file() and "LEARN_SEED=" in proc.stdout


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith("sft_")], ids=lambda p: p.name)
def test_sft_config_builds_its_conversations(path):
    # SFT prompts ask for the kernel language (kernel_language), not the training backend (backend: torch)
    from smart.rollout.data import load_sft_conversations

    cfg = load_config(SFTConfig, path, [])
    if cfg.data.sft_jsonl:
        pytest.skip("reads a JSONL the run makes")
    convs = load_sft_conversations(cfg.data, cfg.kernel_language, cfg.prompt_style)
    assert convs and "Triton" in convs[0][0]["content"] and convs[0][-1]["role"] == "assistant"


def test_learning_config_refuses_a_prepared_synth_set_made_with_other_settings(tmp_path):
    # run_learning.sh skips its synth stage when RUN/synth exists (a set prepared off the device), so a stale
    # set (another solution style or seed) would train silently on the wrong problems
    script, config = str(REPO / "scripts" / "learning_config.py"), str(REPO / "configs" / "learn_synth_gpu.yaml")
    made = {**yaml.safe_load(open(config))["synth"], "seed": 0, "solution_style": "ssa"}  # the config's set, but ssa
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "manifest.json").write_text(json.dumps({"config": made}))

    def run(*overrides):
        return subprocess.run([sys.executable, script, config, str(tmp_path), *overrides],
                              capture_output=True, text=True, timeout=120)

    stale = run()
    assert stale.returncode == 2 and "solution_style: set has 'ssa', config asks 'mixed'" in stale.stderr
    assert run("synth.solution_style=ssa").returncode == 0
    other_seed = run("synth.solution_style=ssa", "seed=1")
    assert other_seed.returncode == 2 and "seed: set has 0" in other_seed.stderr
    assert run("synth.solution_style=ssa", "seed=1", "synth.seed=0").returncode == 0  # the data pinned across seeds
    (tmp_path / "synth" / "manifest.json").write_text("{truncated")
    unreadable = run()
    assert unreadable.returncode == 2 and "cannot read" in unreadable.stderr and "Traceback" not in unreadable.stderr


def test_optimizer_from_sft_is_passed_by_the_launcher_to_the_arms_that_keep_it(tmp_path):
    # rl.train.optimizer_from: sft names a checkpoint that exists only once SFT stops: the stage configs drop
    # the marker, and LEARN_RL_OPTIMIZER_FROM_SFT lists the GRPO runs run_learning.sh hands SFT's checkpoint to
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"),
                           str(REPO / "configs" / "learn_synth_cpu.yaml"), str(tmp_path),
                           'ablations={rl_fresh: {train.optimizer_from: ""}, rl_same: {train.lr: 1.0e-5}}'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LEARN_RL_OPTIMIZER_FROM_SFT='rl rl_same'" in proc.stdout
    for name in ("rl", "rl_fresh", "rl_same"):
        assert "optimizer_from" not in yaml.safe_load((tmp_path / "config" / f"{name}.yaml").read_text())["train"]


def test_learning_config_deals_the_ablations_out_to_the_side_lanes(tmp_path):
    # lanes: N runs the main GRPO and N - 1 side lanes at once (one GPU each on an N-GPU machine); the side
    # lanes take the ablations in turn, and with lanes: 1 the one side lane follows the main one with all of them
    arms = "ablations={rl_a: {train.lr: 1.0e-5}, rl_b: {train.lr: 2.0e-5}, rl_c: {train.lr: 3.0e-5}}"

    def settings(*overrides):
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"),
                               str(REPO / "configs" / "learn_synth_cpu.yaml"), str(tmp_path), arms, *overrides],
                              capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stdout + proc.stderr

    rc, out = settings("lanes=3")
    assert rc == 0 and "LEARN_LANE_ARMS_1='rl_a rl_c'" in out and "LEARN_LANE_ARMS_2=rl_b" in out
    rc, out = settings("lanes=1")
    assert rc == 0 and "LEARN_LANE_ARMS_1='rl_a rl_b rl_c'" in out and "LEARN_LANE_ARMS_2" not in out
    rc, out = settings("lanes=0")
    assert rc == 2 and "lanes must be a whole number from 1" in out and "Traceback" not in out


def test_every_setting_run_learning_reads_is_one_learning_config_writes(tmp_path):
    # a key renamed in the config but not in the launcher is read as unset and silently takes its default (the
    # evaluations ran with one CPU evaluator, not eval.cpu_evaluators, after cpu_workers was renamed)
    sys.path.insert(0, str(REPO / "scripts"))
    import learning_config

    script = (REPO / "scripts" / "run_learning.sh").read_text()
    read = set(re.findall(r"LEARN_([A-Z0-9_]+[A-Z0-9])\b", script)) - {"LANE_ARMS"}
    written = {"SEED", "LANES", "RL_POOL", "SYNTH_ARGS", "ABLATIONS", "PROMPT_STYLE", "SFT_NUM_STEPS",
               "RL_OPTIMIZER_FROM_SFT", "RL_STEPS_PER_ROLLOUT"}
    for prefix, keys in (("EVAL", learning_config.EVAL_KEYS), ("MODEL", learning_config.MODEL_KEYS),
                         ("SFT_STOP", learning_config.SFT_STOP_KEYS), ("CONTROLS", learning_config.CONTROL_KEYS)):
        written |= {f"{prefix}_{key.upper()}" for key in keys}
    printed = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"),
                              str(REPO / "configs" / "learn_synth_gpu.yaml"), str(tmp_path)],
                             capture_output=True, text=True, timeout=120).stdout
    fixed = {line.split("=")[0].removeprefix("LEARN_") for line in printed.splitlines()
             if not line.startswith(("LEARN_EVAL_", "LEARN_MODEL_", "LEARN_SFT_STOP_", "LEARN_CONTROLS_", "LEARN_LANE_ARMS_"))}
    assert fixed <= written, f"learning_config.py prints {sorted(fixed - written)}: add them to this test's list"
    assert read <= written, f"run_learning.sh reads {sorted(read - written)}, which learning_config.py never writes"


def test_an_empty_override_clears_a_setting_as_smarts_own_overrides_do(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"),
                           str(REPO / "configs" / "learn_synth_gpu.yaml"), str(tmp_path), "rl.rollout.filter_fn="],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load((tmp_path / "config" / "rl.yaml").read_text())["rollout"]["filter_fn"] == ""
