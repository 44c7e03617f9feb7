"""python -m pytest tests/bench/test_bench_e2e.py -q

The whole user path offline: a tiny Qwen3 served by `kbench serve`, then the single-problem script and
generate -> eval -> report against that real HTTP server, with the real evaluator on CPU. The tiny
model writes gibberish, so verdicts are format errors; what is checked is that every stage runs,
records one verdict per (problem, sample) and reports them.
"""

import json
import subprocess
import sys

import pytest

from tests.support import ENV, REPO, kbench_server


@pytest.fixture(scope="module")
def served_model(tiny_model):
    with kbench_server(tiny_model) as served:
        yield tiny_model, served.url


def run(*argv):
    out = subprocess.run([sys.executable, *argv], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{argv} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


def test_single_problem_script_against_served_model(served_model):
    model, url = served_model
    out = run("scripts/generate_and_eval_single_sample.py", "dataset_src=bundled", "level=1", "problem_id=1",
              "server_type=openai", f"model_name={model}", f"base_url={url}/v1", "max_tokens=32",
              "prompt_style=zero_shot", "device=cpu", "verbose=True")
    assert "prompt: user" in out.stdout and "EvalResult" in out.stdout
    assert any(s in out.stdout for s in ("format_error", "compile_error", "rejected", "correct", "incorrect"))


@pytest.mark.slow  # generate + evaluate + report end to end: ~30 s
def test_generate_eval_report_against_served_model(served_model, tmp_path):
    model, url = served_model
    common = ["run_name=tiny", f"runs_dir={tmp_path}"]
    run("scripts/generate_samples.py", *common, "dataset_src=bundled", "level=1", "subset=[1,2]", "num_samples=2",
        "server_type=openai", f"model_name={model}", f"base_url={url}/v1", "max_tokens=32",
        "prompt_style=zero_shot", "temperature=1.0", "num_workers=4")
    gens = sorted((tmp_path / "tiny" / "generations").glob("*/sample_*.json"))
    assert len(gens) == 4 and all(json.loads(p.read_text())["error"] == "" for p in gens)

    run("scripts/eval_from_generations.py", *common, "device=cpu")
    lines = (tmp_path / "tiny" / "results.jsonl").read_text().splitlines()
    keys = sorted((json.loads(line)["problem_key"], json.loads(line)["sample"]) for line in lines)
    assert keys == [("L1_1_ReLU", 0), ("L1_1_ReLU", 1), ("L1_2_GELU", 0), ("L1_2_GELU", 1)]

    out = run("scripts/benchmark_eval_analysis.py", *common, "json=True")
    report = json.loads(out.stdout)
    assert report["n_results"] == report["n_generations"] == 4
    assert report["summary"]["all"]["n_problems"] == 2
    assert (tmp_path / "tiny" / "report.html").is_file()
