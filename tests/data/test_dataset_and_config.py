"""Problem loaders (bundled, local folder, Hugging Face parquet), the config system and `kbench check`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from kbencheval.config import ConfigError, apply_overrides, load_config
from kbencheval.dataset import ProblemError, get_problem, load_bundled, load_huggingface, load_local, parse_problem
from kbencheval.eval import EvalConfig

RELU = next(p for p in load_bundled(1) if p.problem_id == 1)


def test_parse_problem_reads_extensions():
    assert RELU.small_sizes and RELU.name == "ReLU" and RELU.key == "L1_1_ReLU"
    assert RELU.solution_source and "ModelNew" in RELU.solution_source


def test_malformed_problem_names_the_fix():
    with pytest.raises(ProblemError, match="no get_inputs"):
        parse_problem("import torch\nclass Model: pass\ndef get_init_inputs(): return []\n", name="x")
    with pytest.raises(ProblemError, match="not valid Python"):
        parse_problem("def broken(:\n", name="x")


def test_local_folder(tmp_path):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(RELU.source)
    (tmp_path / "level1" / "2_Other.py").write_text(RELU.source)
    problems = load_local(tmp_path, 1)
    assert [(p.problem_id, p.name) for p in problems] == [(2, "Other"), (19, "ReLU")]
    assert get_problem("local", 1, 19, path=str(tmp_path)).source == RELU.source
    with pytest.raises(ProblemError, match="no problem 7"):
        get_problem("local", 1, 7, path=str(tmp_path))


def test_huggingface_layout_offline(tmp_path):
    """A parquet file in KernelBench's hub layout loads through `datasets`, with no network."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    table = pa.table({"code": [RELU.source, RELU.source], "level": [1, 1],
                      "name": ["19_ReLU.py", "3_Copy.py"], "problem_id": [19, 3]})
    pq.write_table(table, tmp_path / "data" / "level_1-00000-of-00001.parquet")
    problems = load_huggingface(1, str(tmp_path))
    assert [(p.problem_id, p.name, p.level) for p in problems] == [(3, "Copy", 1), (19, "ReLU", 1)]
    with pytest.raises(ProblemError, match="level_2"):
        load_huggingface(2, str(tmp_path))


@dataclasses.dataclass
class Inner:
    rate: float = 0.1
    name: str = "a"


@dataclasses.dataclass
class Outer:
    steps: int = 1
    flag: bool = False
    inner: Inner = dataclasses.field(default_factory=Inner)
    tags: list[str] = dataclasses.field(default_factory=list)


def test_config_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("steps: 3\ninner:\n  rate: 0.5\n")
    cfg = load_config(Outer, path, ["flag=True", "inner.name=b", "steps=7"])
    assert (cfg.steps, cfg.flag, cfg.inner.rate, cfg.inner.name) == (7, True, 0.5, "b")
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        load_config(Outer, None, ["stepz=2"])
    with pytest.raises(ConfigError, match="inner.rat"):
        load_config(Outer, None, ["inner.rat=2"])
    with pytest.raises(ConfigError, match="must be int"):
        load_config(Outer, None, ["steps=abc"])
    with pytest.raises(ConfigError, match="cannot read override 'tags=\\[a\\]'.*quote strings"):
        load_config(Outer, None, ["tags=[a]"])
    assert load_config(Outer, None, ['tags=["a"]']).tags == ["a"]
    path.write_text("bogus: 1\n")
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        load_config(Outer, path)


def test_unknown_nested_key_suggests_the_full_dotted_key():
    with pytest.raises(ConfigError, match=r"'inner.rat' in overrides \(did you mean 'inner.rate'\?\)"):
        load_config(Outer, None, ["inner.rat=2"])
    with pytest.raises(ConfigError, match="valid keys: inner.rate, inner.name$"):
        load_config(Outer, None, ["inner.zzz=2"])
    with pytest.raises(ConfigError, match="'steps' is a value, not a section"):
        load_config(Outer, None, ["steps.x=2"])  # was a TypeError traceback


def test_eval_config_validation():
    with pytest.raises(ConfigError, match="device='tpu' is not supported: use cpu, cuda or cuda:N"):
        EvalConfig(device="tpu")
    with pytest.raises(ConfigError, match="set trials >= 1"):
        EvalConfig(trials=0)
    given = EvalConfig(device="cuda")
    given.validate()
    assert given.device == "cuda"  # validation never rewrites the caller's config
    cfg = apply_overrides(EvalConfig(), ["trials=2", "timing_mode=cuda_graph"])
    assert cfg.trials == 2 and cfg.timing_mode == "cuda_graph"
    with pytest.raises(ConfigError, match="must be one of"):
        apply_overrides(EvalConfig(), ["timing_mode=fast"])


def _kbench(*args):
    return subprocess.run([sys.executable, "-m", "kbencheval.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # two cold evaluator starts through the CLI: ~40 s
def test_kbench_check_cli(tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text(RELU.solution_source)
    r = _kbench("check", "--ref", RELU.path, "--kernel", str(kernel), "--json", "trials=2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"] == "correct" and out["speedup"] is None
    # a crashing candidate is still a verdict: exit 0
    kernel.write_text(RELU.solution_source.replace("return y", "return y[None, 5]"))
    r = _kbench("check", "--level", "1", "--problem-id", "1", "--kernel", str(kernel), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] != "correct"
    # bad arguments: one line, non-zero
    for args in (["--ref", "nope.py", "--kernel", str(kernel)], ["--ref", RELU.path, "--kernel", str(kernel), "trialz=1"]):
        r = _kbench("check", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
