"""Whole-benchmark runs: generate resumes with the right seeds, eval survives SIGKILL, report reads it back."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kbencheval.llm.base as llm_base
from kbencheval.bench import generate as gen_mod
from kbencheval.bench.common import resolve_devices
from kbencheval.bench.report import parse_args
from kbencheval.bench.store import generation_path, read_json, read_results
from kbencheval.config import ConfigError
from kbencheval.llm.base import Completion

REPO = Path(__file__).resolve().parents[2]


class SeedEchoClient:
    """Implements the LLMClient protocol; each completion names the seed it was drawn with."""

    calls: list = []

    def __init__(self, *args, **kwargs):
        pass

    def chat(self, messages_batch, params):
        SeedEchoClient.calls.append((len(messages_batch), params.n, params.seed))
        return [[Completion(text=f"seed {params.seed + j}", error="overloaded" if params.seed + j == 3 else "")
                 for j in range(params.n)] for _ in messages_batch]

    def close(self):
        pass


def test_generate_resumes_missing_samples_with_their_own_seeds(tmp_path, monkeypatch):
    monkeypatch.setattr(llm_base, "make_client", SeedEchoClient)
    SeedEchoClient.calls = []
    args = ["run_name=r", f"runs_dir={tmp_path}", "subset=[1,2]", "model_name=m", "seed=0"]
    assert gen_mod.main(args + ["num_samples=2"]) == 0
    run = tmp_path / "r"
    generation_path(run, "L1_1_ReLU", 1).unlink()  # as if killed before this file was written
    SeedEchoClient.calls = []
    assert gen_mod.main(args + ["num_samples=4"]) == 0
    # problem 1 misses samples 1..3 (one call, n=3, seed 1); problem 2 misses 2..3 (n=2, seed 2)
    assert sorted(SeedEchoClient.calls) == [(1, 2, 2), (1, 3, 1)]
    for key in ("L1_1_ReLU", "L1_2_GELU"):
        for k in range(4):
            g = read_json(generation_path(run, key, k))
            assert g["text"] == f"seed {k}" and g["sample"] == k
            assert g["error"] == ("overloaded" if k == 3 else "")
            assert g["messages"][-1]["role"] == "user"
    manifest = read_json(run / "manifest.json")
    assert [p["key"] for p in manifest["problems"]] == ["L1_1_ReLU", "L1_2_GELU"]
    assert gen_mod.main(args + ["num_samples=4", "model_name=other"]) == 2  # a different experiment


def test_report_accepts_positional_flags_and_key_value():
    cfg = parse_args(["myrun", "--json", "--html", "/tmp/x.html"])
    assert (cfg.run_name, cfg.json, cfg.html) == ("myrun", True, "/tmp/x.html")
    assert parse_args(["run_name=a", "runs_dir=/r"]).runs_dir == "/r"
    with pytest.raises(ConfigError):
        parse_args(["a", "hardware=L40S"])


def test_cuda_device_without_gpu_names_the_fix():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert resolve_devices("auto", cpu_evaluators=2) == ["cpu", "cpu"]
    with pytest.raises(ConfigError, match="device=cpu"):
        resolve_devices("cuda")


def test_evaluators_per_gpu_repeats_each_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_devices("cuda", evaluators_per_gpu=2) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]
    assert resolve_devices("cuda:1", evaluators_per_gpu=3) == ["cuda:1"] * 3
    assert resolve_devices("cpu", cpu_evaluators=2, evaluators_per_gpu=4) == ["cpu", "cpu"]  # CPU: cpu_evaluators decides
    with pytest.raises(ConfigError, match="evaluators_per_gpu >= 1"):
        resolve_devices("cuda", evaluators_per_gpu=0)


def test_report_has_a_per_problem_table_on_the_terminal_and_in_the_html(tmp_path, capsys):
    from kbencheval.bench import report

    run = tmp_path / "r"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"run_name": "r", "model": "m"}))
    rows = [("L1_1_ReLU", 0, True, 1.5), ("L1_1_ReLU", 1, False, None), ("L1_2_GELU", 0, True, None),
            ("L1_3_SiLU", 0, False, None)]
    (run / "results.jsonl").write_text("".join(json.dumps(
        {"problem_key": key, "sample": k, "level": 1, "problem_id": int(key[3]), "status": "correct" if ok else
         "incorrect", "correct": ok, "compiled": True, "speedup": speedup, "timing_meaningful": speedup is not None,
         "device": "cuda:0"}) + "\n" for key, k, ok, speedup in rows))
    assert report.main(["r", f"runs_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("per problem"):]
    for key, line in (("L1_1_ReLU", ["2", "1", "50.0%", "1.50x"]), ("L1_2_GELU", ["1", "1", "100.0%", "untimed"]),
                      ("L1_3_SiLU", ["1", "0", "0.0%", "-"])):
        assert re.search(key + r"\W+" + r"\W+".join(map(re.escape, line)), table), table
    html = (run / "report.html").read_text()
    assert "<h2>Per problem</h2>" in html and "<td>L1_1_ReLU</td><td>2</td><td>1</td><td>50.0%</td><td>1.50x</td>" in html


def kbench(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "kbencheval.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, **kwargs)


def test_eval_killed_with_sigkill_resumes_to_exactly_one_result_per_sample(tmp_path):
    runs = str(tmp_path)
    out = kbench("generate", "run_name=ref", f"runs_dir={runs}", "level=1", "subset=[1,2,3]", "num_samples=2",
                 "server_type=reference")
    assert out.returncode == 0, out.stderr
    run = tmp_path / "ref"
    # one failed request: must become a format_error verdict, not a crash
    bad = read_json(generation_path(run, "L1_3_SiLU", 1))
    bad.update(text="", error="HTTP 503")
    generation_path(run, "L1_3_SiLU", 1).write_text(json.dumps(bad))
    results = run / "results.jsonl"

    proc = subprocess.Popen([sys.executable, "-m", "kbencheval.cli", "eval", "run_name=ref", f"runs_dir={runs}",
                             "device=cpu"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and results.read_bytes().count(b"\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "eval finished before it could be killed; the test needs more samples"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_before = len(read_results(results)[0])
    assert 1 <= n_before < 6
    with open(results, "ab") as f:  # and a write torn by the kill
        f.write(b'{"problem_key": "L1_2_GELU", "sample": 1, "sta')

    out = kbench("eval", "run_name=ref", f"runs_dir={runs}", "device=cpu")
    assert out.returncode == 0, out.stderr
    lines = results.read_text().splitlines()
    keys = [(r["problem_key"], r["sample"]) for r in map(json.loads, lines)]  # every line parses
    assert sorted(keys) == sorted({(p, k) for p in ("L1_1_ReLU", "L1_2_GELU", "L1_3_SiLU") for k in (0, 1)})
    by_key = {(r["problem_key"], r["sample"]): r for r in map(json.loads, lines)}
    assert by_key[("L1_3_SiLU", 1)]["status"] == "format_error"
    assert all(r["status"] == "correct" for k, r in by_key.items() if k != ("L1_3_SiLU", 1))

    again = kbench("eval", "run_name=ref", f"runs_dir={runs}", "device=cpu")  # nothing left to do
    assert again.returncode == 0 and results.read_text().splitlines() == lines

    rep = kbench("report", "ref", f"runs_dir={runs}", "--json")
    assert rep.returncode == 0, rep.stderr
    summary = json.loads(rep.stdout)["summary"]["levels"]["1"]
    assert summary["n_samples"] == 6 and summary["correct_rate"] == pytest.approx(5 / 6)
    assert summary["fast_p"]["0"] == pytest.approx(5 / 6)
    assert summary["fast_p"]["1"] is None  # CPU interpreter: no speedup claimed
    assert summary["pass_at_k"]["1"] == pytest.approx((1 + 1 + 0.5) / 3)
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4


class SolutionClient:
    """Implements the LLMClient protocol; answers with the bundled ReLU solution, wrapped in prose."""

    def __init__(self, *args, **kwargs):
        pass

    def chat(self, messages_batch, params):
        from kbencheval.dataset import get_problem

        code = get_problem("bundled", 1, 1).solution_source
        return [[Completion(text=f"<think>plan</think>Here it is:\n```python\n{code}```", finish_reason="stop")]
                * params.n for _ in messages_batch]

    def close(self):
        pass


def test_run_one_shows_prompt_kernel_and_verdict(monkeypatch, capsys):
    from kbencheval.bench import run_one

    monkeypatch.setattr(llm_base, "make_client", SolutionClient)
    rc = run_one.main(["dataset_src=bundled", "level=1", "problem_id=1", "model_name=m", "device=cpu"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "prompt: user" in out and "extracted kernel" in out and "relu_kernel" in out
    assert "correct" in out and "not measured meaningfully" in out


def test_unreadable_generation_is_retried_not_recorded(tmp_path):
    from kbencheval.bench import evaluate

    args = ["generate", "run_name=r", f"runs_dir={tmp_path}", "subset=[1,2]", "server_type=reference"]
    assert kbench(*args).returncode == 0
    generation_path(tmp_path / "r", "L1_2_GELU", 0).write_text('{"problem_key": "L1_2_GE')  # damaged file
    assert evaluate.main(["run_name=r", f"runs_dir={tmp_path}", "device=cpu"]) == 1
    records, _ = read_results(tmp_path / "r" / "results.jsonl")
    assert list(records) == [("L1_1_ReLU", 0)] and records[("L1_1_ReLU", 0)]["status"] == "correct"


def test_dedupe_judges_the_same_code_once_and_records_every_sample(tmp_path):
    from kbencheval.bench.evaluate import EvalRunConfig, evaluate_run

    args = ["generate", "run_name=r", f"runs_dir={tmp_path}", "subset=[1]", "server_type=reference", "num_samples=3"]
    assert kbench(*args).returncode == 0  # the reference server writes the same solution three times
    cfg = EvalRunConfig(run_name="r", runs_dir=str(tmp_path), device="cpu", dedupe=True)
    stats = evaluate_run(cfg)
    assert stats["evaluated"] == 3 and stats["shared_verdicts"] == 2
    records, _ = read_results(tmp_path / "r" / "results.jsonl")
    assert sorted(records) == [("L1_1_ReLU", 0), ("L1_1_ReLU", 1), ("L1_1_ReLU", 2)]
    assert {r["status"] for r in records.values()} == {"correct"}
