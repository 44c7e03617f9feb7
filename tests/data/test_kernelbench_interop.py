"""A KernelBench run folder, written here in the layout its scripts use, re-judged end to end by
`kbench kernelbench import`, shown beside its recorded numbers, and exported back in its format."""

import json
from pathlib import Path

import pytest

from kbencheval.bench import kernelbench as kb
from kbencheval.bench.report import build_report
from kbencheval.bench.store import read_json, read_results
from kbencheval.config import ConfigError

SOLUTIONS = Path(__file__).resolve().parents[2] / "kbencheval" / "problems" / "solutions" / "level1"


def write_kernelbench_run(root: Path, shape: str = "list") -> Path:
    """runs/<name>/ as generate_samples.py and eval_from_generations.py leave it: level 1 of the bundled
    suite; problem 1 sample 0 right, sample 1 wrong (KernelBench recorded it as correct); problems 2 and 3
    recorded only (no kernel file: this keeps the CPU evaluation to two candidates)."""
    run = root / "kb_tiny"
    run.mkdir(parents=True)
    relu = (SOLUTIONS / "1_ReLU.py").read_text()
    (run / "level_1_problem_1_sample_0_kernel.py").write_text(relu)
    (run / "level_1_problem_1_sample_1_kernel.py").write_text(relu.replace("tl.maximum", "tl.minimum"))
    (run / "generation_config.yaml").write_text(
        "dataset_src: local\ndataset_name: ScalingIntelligence/KernelBench\nlevel: 1\nrun_name: kb_tiny\n"
        "server_type: deepseek\nmodel_name: deepseek-coder\nbackend: triton\ntemperature: 0.0\n")

    def entry(sample, compiled, correct, runtime, ref):
        return {"sample_id": sample, "compiled": compiled, "correctness": correct,
                "metadata": {"hardware": "NVIDIA L40S", "device": "cuda:0"} if compiled else
                {"compilation_error": "name 'tl' is not defined"},
                "runtime": runtime, "runtime_stats": {"mean": runtime, "std": 0.001, "num_trials": 100} if correct
                else {}, "ref_runtime": ref}

    records = {"1": [entry(0, True, True, 0.02, 0.03), entry(1, True, True, 0.04, 0.03)],
               "2": [entry(0, True, True, 0.05, 0.05)], "3": [entry(0, False, False, -1.0, -1.0)]}
    if shape == "single":  # early KernelBench: one record per problem
        records = {pid: rs[0] for pid, rs in records.items()}
    elif shape == "by_sample":
        records = {pid: {str(r["sample_id"]): r for r in rs} for pid, rs in records.items()}
    (run / "eval_results.json").write_text(json.dumps(records, indent=4))
    return run


@pytest.mark.parametrize("shape", ["list", "single", "by_sample"])
def test_every_eval_results_shape_reads_the_same(tmp_path, shape):
    run = write_kernelbench_run(tmp_path, shape)
    rows = kb.parse_eval_results(json.loads((run / "eval_results.json").read_text()), level=1)
    p1 = [r for r in rows if r["problem_id"] == 1]
    assert p1[0]["correct"] and p1[0]["speedup"] == pytest.approx(1.5) and p1[0]["runtime_ms"] == 0.02
    failed = [r for r in rows if r["problem_id"] == 3][0]
    assert failed["runtime_ms"] is None and failed["speedup"] is None and "compilation_error" in failed["error"]
    assert len(rows) == (3 if shape == "single" else 4)


def test_import_rejudges_reports_side_by_side_and_exports_round_trip(tmp_path, capsys):
    kb_run = write_kernelbench_run(tmp_path / "KernelBench" / "runs")
    runs = tmp_path / "ours"
    assert kb.main(["import", str(kb_run), f"runs_dir={runs}", "dataset_src=bundled", "device=cpu"]) == 0
    run = runs / "kb_tiny_rejudged"
    manifest = read_json(run / "manifest.json")
    assert manifest["backend"] == "triton" and manifest["model"] == "deepseek-coder"  # from generation_config.yaml
    records = {(r["problem_id"], r["sample"]): r for r in read_results(run / "results.jsonl")[0].values()}
    assert {k: r["status"] for k, r in records.items()} == {(1, 0): "correct", (1, 1): "incorrect"}
    out = capsys.readouterr().out
    assert "KernelBench recorded vs ours" in out and "only kernelbench correct" in out

    cmp = build_report(run)["kernelbench"]
    assert cmp["n_recorded"] == 4 and cmp["n_both"] == 2
    assert cmp["agreement"] == {"both_correct": 1, "both_wrong": 0, "only_kernelbench_correct": 1,
                                "only_ours_correct": 0}
    assert cmp["kernelbench"]["correct_rate"] == 1.0 and cmp["ours"]["correct_rate"] == 0.5
    assert cmp["kernelbench"]["geomean_speedup"] == pytest.approx((1.5 * 0.75) ** 0.5)
    no_kernel = [r for r in cmp["rows"] if r["problem_id"] == 3][0]
    assert no_kernel["kb_correct"] is False and no_kernel["status"] is None

    # a second import adds nothing and judges nothing again
    assert kb.main(["import", str(kb_run), f"runs_dir={runs}", "dataset_src=bundled", "device=cpu"]) == 0
    assert len(read_results(run / "results.jsonl")[0]) == 2

    assert kb.main(["export", "kb_tiny_rejudged", f"runs_dir={runs}"]) == 0
    exported = json.loads((run / "eval_results.json").read_text())
    assert sorted(exported) == ["1"] and [e["sample_id"] for e in exported["1"]] == [0, 1]
    assert exported["1"][1]["correctness"] is False and exported["1"][1]["metadata"]["kbench_status"] == "incorrect"
    assert exported["1"][0]["runtime"] == -1.0  # the CPU interpreter's times are not claimed
    back = {(r["problem_id"], r["sample"]): r for r in kb.parse_eval_results(exported, level=1)}
    assert {k: (r["compiled"], r["correct"]) for k, r in back.items()} == \
        {k: (bool(r["compiled"]), bool(r["correct"])) for k, r in records.items()}


def test_export_converts_timed_results_to_milliseconds():
    stats = {"median_us": 20.0, "mean_us": 21.0, "std_us": 1.0, "p10_us": 19.0, "p90_us": 23.0, "n": 50}
    rec = {"problem_id": 7, "sample": 2, "level": 1, "status": "correct", "compiled": True, "correct": True,
           "timing_meaningful": True, "runtime_us": 21.0, "ref_runtime_us": 42.0, "runtime_stats": stats,
           "ref_runtime_stats": stats, "speedup": 2.0}
    out = kb.to_kernelbench([rec])["7"][0]
    assert out["runtime"] == pytest.approx(0.021) and out["ref_runtime"] == pytest.approx(0.042)
    assert out["runtime_stats"]["mean"] == pytest.approx(0.021) and out["runtime_stats"]["num_trials"] == 50
    assert kb.parse_eval_results({"7": [out]}, level=1)[0]["speedup"] == pytest.approx(2.0)


def test_setup_errors_are_one_line(tmp_path, capsys):
    kb_run = write_kernelbench_run(tmp_path)
    (kb_run / "level_2_problem_1_sample_0_kernel.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match="levels \\[1, 2\\]; import one at a time with level=N"):
        kb.import_run(kb.ImportConfig(kb_run=str(kb_run), runs_dir=str(tmp_path / "o"), dataset_src="bundled"))
    assert kb.main(["import", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="backend is 'cute'"):
        kb.import_run(kb.ImportConfig(kb_run=str(kb_run), runs_dir=str(tmp_path / "o"), dataset_src="bundled",
                                      level=1, backend="cute"))
