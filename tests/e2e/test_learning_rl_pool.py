"""The learning config's rl_pool: train problems kept out of SFT for GRPO (scripts/learning_rl_pool.py) and the
stage configs that point SFT and GRPO at the two sets (scripts/learning_config.py)."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _synth(root: Path, train: int) -> Path:
    synth = root / "synth"
    (synth / "train" / "level1").mkdir(parents=True)
    problems = []
    for i in range(1, train + 1):
        name = f"{i}_Op{i}.py"
        (synth / "train" / "level1" / name).write_text(f"# problem {i}\n")
        problems.append({"key": f"L1_{i}_Op{i}", "file": name, "split": "train"})
    problems.append({"key": "L1_99_Test", "file": "99_Test.py", "split": "test"})
    (synth / "manifest.json").write_text(json.dumps({"problems": problems}))
    rows = [{"messages": [], "problem": p["key"], "variant": "v"} for p in problems if p["split"] == "train"]
    (synth / "sft_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return synth


def _pool(run: Path, n: int):
    return subprocess.run([sys.executable, str(REPO / "scripts" / "learning_rl_pool.py"), str(run), str(n)],
                          capture_output=True, text=True, timeout=60)


def test_the_pool_is_out_of_sft_and_is_grpos_problem_set(tmp_path):
    synth = _synth(tmp_path, train=12)  # ids 1..12: the pool is the highest 3, in id order not name order
    proc = _pool(tmp_path, 3)
    assert proc.returncode == 0, proc.stderr
    pooled = sorted(p.name for p in (synth / "rl_pool" / "level1").iterdir())
    assert pooled == ["10_Op10.py", "11_Op11.py", "12_Op12.py"]
    sft = [json.loads(line)["problem"] for line in (synth / "sft_train_minus_rl_pool.jsonl").read_text().splitlines()]
    assert sft == [f"L1_{i}_Op{i}" for i in range(1, 10)]
    assert _pool(tmp_path, 2).returncode == 0  # remade from scratch: a smaller pool leaves no stale file behind
    assert len(list((synth / "rl_pool" / "level1").iterdir())) == 2


def test_a_pool_as_large_as_train_is_a_one_line_error(tmp_path):
    _synth(tmp_path, train=4)
    proc = _pool(tmp_path, 4)
    assert proc.returncode == 2 and "0 < rl_pool < 4" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "synth" / "sft_train_minus_rl_pool.jsonl").exists()


def test_learning_config_points_sft_and_grpo_at_the_two_sets(tmp_path):
    def stage(*overrides):
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"),
                               str(REPO / "configs" / "learn_synth_cpu.yaml"), str(tmp_path), *overrides],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        config = tmp_path / "config"
        return proc.stdout, *(yaml.safe_load((config / f"{name}.yaml").read_text()) for name in ("sft", "rl"))

    out, sft, rl = stage("rl_pool=3")
    assert "LEARN_RL_POOL=3" in out
    command = (tmp_path / "config" / "command.txt").read_text()  # what the report prints: config and overrides
    assert command.endswith(f"configs/learn_synth_cpu.yaml {tmp_path} rl_pool=3\n")
    assert sft["data"]["sft_jsonl"].endswith("synth/sft_train_minus_rl_pool.jsonl")
    assert rl["data"]["path"].endswith("synth/rl_pool")
    out, sft, rl = stage("rl_pool=0")
    assert sft["data"]["sft_jsonl"].endswith("synth/sft_train.jsonl") and rl["data"]["path"].endswith("synth/train")
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "learning_config.py"),
                          str(REPO / "configs" / "learn_synth_cpu.yaml"), str(tmp_path), "rl_pool=-1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "rl_pool must be a whole number" in bad.stderr
