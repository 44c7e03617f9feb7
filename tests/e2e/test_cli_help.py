"""Every command answers --help with its keys (types, defaults) and an example, and exits 0; the bench
commands and smart's reward share one config vocabulary.   pytest tests/e2e/test_cli_help.py"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kbencheval import cli as kbench_cli
from kbencheval.config import ConfigError, load_config
from smart import cli as smart_cli

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (REPO / "scripts").iterdir() if p.suffix in (".py", ".sh"))
KEY_LINE = re.compile(r"^\s+\S+: .+ = .+", re.M)  # "  name: type = default  doc"


def _in_process(main, argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse exits on --help
        code = e.code
    return int(code or 0), capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(kbench_cli.SUBCOMMANDS))
def test_every_kbench_subcommand_answers_help(name, capsys):
    code, out = _in_process(kbench_cli.main, [name, "--help"], capsys)
    assert code == 0, out
    assert "example" in out.lower() and "usage" in out.lower()
    assert KEY_LINE.search(out) or "(default:" in out, out  # key=value keys with type and default, or argparse defaults


@pytest.mark.parametrize("name", sorted(smart_cli.SUBCOMMANDS))
def test_every_smart_subcommand_answers_help(name, capsys):
    code, out = _in_process(smart_cli.main, [name, "--help"], capsys)
    assert code == 0 and "example" in out and KEY_LINE.search(out)
    assert "train.lr: float = " in out and "backend: str = 'torch'" in out  # the backend's section is listed


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help(script):
    cmd = [sys.executable, f"scripts/{script}"] if script.endswith(".py") else ["bash", f"scripts/{script}"]
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([*cmd, "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "example" in r.stdout.lower(), r.stdout


def test_eval_command_takes_nested_eval_keys_and_flat_aliases():
    from kbencheval.bench.config import EVAL_ALIASES, load_cli_config
    from kbencheval.bench.evaluate import USAGE, EvalRunConfig

    cfg = load_cli_config(EvalRunConfig, ["run_name=r", "eval.timing_mode=cuda_graph", "eval.baseline=compile",
                                          "eval.sandbox=none", "trials=2", "timeout_s=30"], USAGE, "", EVAL_ALIASES)
    assert (cfg.eval.timing_mode, cfg.eval.baseline, cfg.eval.sandbox) == ("cuda_graph", "compile", "none")
    assert (cfg.eval.trials, cfg.eval.timeout_s) == (2, 30.0)  # KernelBench-style flat keys are aliases
    with pytest.raises(ConfigError, match="did you mean 'eval.timing_mode'"):
        load_cli_config(EvalRunConfig, ["eval.timing_mod=events"], USAGE, "", EVAL_ALIASES)
    with pytest.raises(ConfigError, match="set trials >= 1"):
        load_cli_config(EvalRunConfig, ["trials=0"], USAGE, "", EVAL_ALIASES)


@pytest.mark.parametrize("name", ["eval", "run-one", "corpus"])
def test_the_evaluator_device_is_one_key(name, capsys):
    """The command's device= sets every evaluator's device: eval.device is neither listed nor settable."""
    command = [name, "verify"] if name == "corpus" else [name]
    _, out = _in_process(kbench_cli.main, [*command, "--help"], capsys)
    assert "device" in re.findall(r"^\s+(\S*device): ", out, re.M) and "eval.device:" not in out
    code = kbench_cli.main([*command, "eval.device=cuda"])
    assert code == 2 and "config key 'eval.device' is set from 'device'; set device=" in capsys.readouterr().err


def test_one_vocabulary_across_run_one_generate_eval_and_reward():
    from kbencheval.bench.config import ClientConfig, DatasetConfig
    from kbencheval.bench.evaluate import EvalRunConfig
    from kbencheval.bench.generate import GenerateConfig
    from kbencheval.bench.run_one import RunOneConfig
    from kbencheval.eval import EvalConfig
    from smart.config import RewardConfig

    shared = {f.name for f in dataclasses.fields(DatasetConfig)} | {f.name for f in dataclasses.fields(ClientConfig)}
    for cls in (RunOneConfig, GenerateConfig):
        assert shared <= {f.name for f in dataclasses.fields(cls)}
    for cls in (RunOneConfig, EvalRunConfig, RewardConfig):
        assert isinstance(cls().eval, EvalConfig)
    for cls in (RunOneConfig, GenerateConfig, EvalRunConfig, RewardConfig, EvalConfig, DatasetConfig, ClientConfig):
        with pytest.raises(TypeError):
            cls("positional")  # keyword-only, so a reordered field can never shift a value
    with pytest.raises(ConfigError, match="choose bundled, local or huggingface"):
        load_config(RunOneConfig, None, ["dataset_src=hf"])


def test_importing_the_run_config_loads_no_backend_and_the_driver_names_none():
    code = "import sys, smart.config; bad = [m for m in ('torch', 'ray') if m in sys.modules]; print(bad)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
    driver = (REPO / "smart" / "train.py").read_text().lower()
    for name in ("sglang", "embedded", "torch", "megatron", "fsdp"):
        assert name not in driver, f"smart/train.py names {name!r}; engines and backends are chosen by config"
