"""python -m pytest tests/e2e/test_train_launchers.py -q

What a newcomer meets first with scripts/run_sft.sh, run_rl.sh and run_learning.sh, on the CPU without
training anything: a finished run says so in one line and starts nothing, relative paths are the
caller's (the launchers used to cd to the repository root), a missing config or a config typo is one
line before any model is built, and the help speaks to users.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from smart import cli

REPO = Path(__file__).resolve().parents[2]
FINISHED = "already finished at step 4/4; nothing to train. Use a new out_dir=... or raise num_steps"


def _finished_run(out: Path, steps: int = 4) -> None:
    """What a finished run leaves: its last checkpoint's run_state.json and the HF export."""
    (out / "checkpoints" / f"step_{steps:06d}").mkdir(parents=True)
    (out / "checkpoints" / f"step_{steps:06d}" / "run_state.json").write_text(json.dumps({"next_step": steps}))
    (out / "hf").mkdir()
    (out / "hf" / "config.json").write_text("{}")


def _launch(script: str, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(REPO / "scripts" / script), *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command, extra", [("sft", []), ("rl", []), ("rl-async", ["train.grpo.tis_clip=2"])])
def test_a_finished_run_says_so_and_starts_nothing(command, extra, tmp_path, capsys, monkeypatch):
    import ray

    _finished_run(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    config = REPO / "configs" / ("sft_tiny_cpu.yaml" if command == "sft" else "rl_tiny_cpu.yaml")
    # model_path names nothing: a finished run must not need its model, nor Ray
    code = cli.main([command, str(config), "out_dir=run", "num_steps=4", "model_path=missing", *extra])
    out = capsys.readouterr().out
    assert code == 0 and out == f"run {FINISHED}\n"
    assert not ray.is_initialized()


def test_a_run_missing_its_export_is_not_finished(tmp_path, capsys):
    _finished_run(tmp_path / "run")
    (tmp_path / "run" / "hf" / "config.json").unlink()  # stopped between the last checkpoint and the export
    config = str(REPO / "configs" / "sft_tiny_cpu.yaml")
    assert cli.main(["sft", config, f"out_dir={tmp_path / 'run'}", "num_steps=4", "--check"]) == 0
    assert capsys.readouterr().out == ""
    assert cli.main(["sft", config, f"out_dir={tmp_path / 'run'}", "num_steps=5", "export_hf=false", "--check"]) == 0
    assert capsys.readouterr().out == ""


def test_launcher_paths_are_the_callers(tmp_path):
    """From another directory, a relative config and out_dir are read where the caller stands."""
    caller = tmp_path / "elsewhere"
    (caller / "configs").mkdir(parents=True)
    shutil.copy(REPO / "configs" / "sft_tiny_cpu.yaml", caller / "configs" / "mine.yaml")
    _finished_run(caller / "runs" / "mine")
    r = _launch("run_sft.sh", "configs/mine.yaml", "out_dir=runs/mine", "num_steps=4", cwd=caller)
    assert r.returncode == 0, r.stderr  # before: sed could not read configs/mine.yaml from the repository root
    assert r.stdout == f"runs/mine {FINISHED}\n" and r.stderr == ""
    assert not (caller / "runs" / "tiny-model").exists()  # nothing was built for a finished run


def test_a_missing_config_is_one_line_naming_it(tmp_path):
    for script in ("run_sft.sh", "run_rl.sh", "run_learning.sh"):
        r = _launch(script, "configs/nope.yaml", cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == f"{script}: no config file configs/nope.yaml (relative paths are read from {tmp_path})\n"


def test_a_config_typo_fails_before_a_model_is_built(tmp_path):
    clone = tmp_path / "clone"  # the launchers of a fresh clone: no runs/ anywhere
    shutil.copytree(REPO / "scripts", clone / "scripts")
    r = subprocess.run(["bash", str(clone / "scripts" / "run_sft.sh"), str(REPO / "configs" / "sft_tiny_cpu.yaml"),
                        "num_step=3"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stdout == ""  # before: the tiny model was built first, then the typo found
    assert r.stderr == "smart sft: unknown config key 'num_step' in overrides (did you mean 'num_steps'?)\n"
    assert not (tmp_path / "runs").exists() and not (clone / "runs").exists()


def test_learning_launcher_help_speaks_to_users():
    r = _launch("run_learning.sh", "--help", cwd=REPO)
    assert r.returncode == 0 and "example: " in r.stdout
    assert "issue" not in r.stdout.lower(), r.stdout  # internal tracker numbers mean nothing to a user


def test_readme_train_examples_each_train_into_their_own_folder():
    """The README's CPU Train lines (what CI runs in order): the async example used to share the sync one's
    out_dir, so it resumed a finished run and trained nothing."""
    import yaml

    r = subprocess.run(["bash", "scripts/readme_examples.sh", "--list"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out_dirs = []
    for line in r.stdout.splitlines():
        words = line.split()
        config = next(w for w in words if w.endswith(".yaml"))
        overrides = dict(w.split("=", 1) for w in words[words.index(config) + 1:])
        out_dirs.append(overrides.get("out_dir") or yaml.safe_load((REPO / config).read_text())["out_dir"])
    assert len(out_dirs) >= 3 and len(set(out_dirs)) == len(out_dirs), out_dirs


@pytest.mark.slow  # a Ray start and a model load in a fresh process: 10-15 s on 2 shared cores
def test_a_run_starts_ray_and_loads_models_without_noise(tiny_model, tmp_path):
    """Ray's 'Token authentication is enabled' warning (its default mode, picked for us) and transformers'
    weight-loading bars in the actors: set at their cause (the mode chosen before Ray is imported, the
    workers' environment), the way `smart` starts a run."""
    script = f"""
from smart import cli
assert cli.main(["sft", {str(REPO / "configs" / "sft_tiny_cpu.yaml")!r}, "--check"]) == 0
import ray  # as in `smart sft`: the subcommand's module imports Ray after cli.main started
from smart.tracking import init_ray
from smart.config import ClusterConfig
init_ray(ClusterConfig(num_cpus=1))

@ray.remote(num_cpus=0)
def load():
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained({tiny_model!r}).num_parameters()

assert ray.get(load.remote()) > 0
ray.shutdown()
"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "HF_HUB_DISABLE_PROGRESS_BARS")}
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**env, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Token authentication" not in r.stderr and "Loading weights" not in r.stderr, r.stderr
