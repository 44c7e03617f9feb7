"""The speed stage's measures: kbench report's per-problem fast_p shares, and scripts/learning_compare.py's paired
fast_1 / fast_1.5 changes and kernel counts (fused vs per_op), from timed evaluations written like a learning run's."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import learning_compare  # noqa: E402
from kbencheval.bench.report import build_report  # noqa: E402
from kbencheval.synth import SynthConfig, generate  # noqa: E402

# (problem, sample, correct, speedup) per checkpoint: RL moves problem A's samples from slow to fast kernels
SFT = [("L1_1_A", 0, True, 0.8), ("L1_1_A", 1, True, 3.0), ("L1_2_B", 0, True, 0.9), ("L1_2_B", 1, False, None)]
RL = [("L1_1_A", 0, True, 3.1), ("L1_1_A", 1, True, 2.9), ("L1_2_B", 0, True, 0.9), ("L1_2_B", 1, False, None)]


def write_eval(evals: Path, name: str, rows, texts: dict | None = None, timed: bool = True) -> None:
    """An evaluation folder (results.jsonl, generations) and its `kbench report --json`, as run_learning.sh writes."""
    folder = evals / name
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"run_name": name, "model": "m"}))
    (folder / "results.jsonl").write_text("".join(json.dumps(
        {"problem_key": key, "sample": k, "level": 1, "problem_id": int(key[3]), "correct": ok, "compiled": True,
         "status": "correct" if ok else "incorrect", "speedup": s if timed else None,
         "timing_meaningful": timed and s is not None}) + "\n" for key, k, ok, s in rows))
    for key, k, _, _ in rows:
        (folder / "generations" / key).mkdir(parents=True, exist_ok=True)
        text = (texts or {}).get((key, k), "")
        (folder / "generations" / key / f"sample_{k}.json").write_text(
            json.dumps({"problem_key": key, "sample": k, "text": text}))
    (evals / f"{name}.json").write_text(json.dumps(build_report(folder)))


def test_report_gives_each_problem_its_fast_p_shares(tmp_path):
    write_eval(tmp_path, "test_sft", SFT)
    problems = {p["problem_key"]: p for p in json.loads((tmp_path / "test_sft.json").read_text())["problems"]}
    assert problems["L1_1_A"]["fast_p"]["1"] == 0.5 and problems["L1_1_A"]["fast_p"]["1.5"] == 0.5
    assert problems["L1_2_B"]["fast_p"]["0.8"] == 0.5 and problems["L1_2_B"]["fast_p"]["1"] == 0.0
    write_eval(tmp_path, "test_untimed", SFT, timed=False)
    untimed = json.loads((tmp_path / "test_untimed.json").read_text())["problems"]
    assert all(v is None for p in untimed for v in p["fast_p"].values())  # correct but untimed: no share


def test_compare_pairs_fast_1_5_and_counts_kernels_only_for_timed_evaluations(tmp_path):
    problems = {p.spec.tail: p for p in generate(SynthConfig(n=12, seed=5, min_ops=3, max_ops=5, solution_style="inline",
                                                             variants=["fused_b1024", "fused_w4", "per_op"]))}
    fused, per_op = (f"```python\n{problems['none'].variants[v]}```" for v in ("fused_b1024", "per_op"))
    assert learning_compare.structure_of(fused) == "fused" and learning_compare.structure_of(per_op) == "per_op"
    assert learning_compare.structure_of("no code") == "none"
    write_eval(tmp_path, "test_sft", SFT, {("L1_1_A", 0): per_op, ("L1_1_A", 1): fused, ("L1_2_B", 0): per_op,
                                           ("L1_2_B", 1): per_op})
    write_eval(tmp_path, "test_rl", RL, {key[:2]: fused for key in RL})
    rows = learning_compare.compare(tmp_path, {})["test"]
    assert rows["fast_1.5"] == {"sft": pytest.approx(0.25), "rl": pytest.approx(0.5)}
    change = rows["fast_1.5: rl - sft"]
    assert change["diff"] == pytest.approx(0.25) and change["n"] == 2
    assert rows["pass@1: rl - sft"]["diff"] == pytest.approx(0.0)  # correctness held
    assert rows["by kernels"]["sft"] == {"fused": {"share": 0.25, "pass@1": 1.0, "failures": {}},
                                         "per_op": {"share": 0.75, "pass@1": 0.6667, "failures": {"incorrect": 1}}}
    assert rows["by kernels"]["rl"]["fused"]["share"] == 1.0

    untimed = tmp_path / "untimed"
    untimed.mkdir()
    # a problem no sample solved has fast_p shares of 0, timed or not: they must not make an untimed run look timed
    write_eval(untimed, "test_sft", SFT + [("L1_3_C", 0, False, None)], timed=False)
    write_eval(untimed, "test_rl", RL, timed=False)
    rows = learning_compare.compare(untimed, {})["test"]
    assert "fast_1.5" not in rows and "by kernels" not in rows and "pass@1: rl - sft" in rows


def test_the_report_judges_a_timed_run_by_the_speed_criteria():
    import learning_report

    def c(diff, lo):
        return {"diff": diff, "lo": lo, "hi": diff + 0.05, "n": 96}

    speed = learning_report.criteria_rows({"fast_1.5: rl - sft": c(0.12, 0.04), "pass@1: rl - sft": c(-0.03, -0.06)})
    assert len(speed) == 2 and "fast_1.5" in speed[0] and speed[0].endswith("| met |")
    assert "at most 2 points" in speed[1] and speed[1].endswith("| not met |")  # -3 points: correctness fell too far
    correctness = learning_report.criteria_rows({"pass@1: rl - sft": c(0.16, 0.01)})
    assert len(correctness) == 4 and correctness[0].endswith("| met |") and "not run" in correctness[1]
