"""Corpus loaders (each dataset's real schema, offline), conversion, decontamination, verify -> filter."""

from __future__ import annotations

import dataclasses
import json
import re

import pyarrow.parquet as pq
import pytest

from kbencheval.corpus import convert
from kbencheval.corpus.decontam import Decontaminator, reference_problems
from kbencheval.corpus.filter import FilterConfig, filter_corpus
from kbencheval.corpus.records import CorpusError, load_corpus
from kbencheval.corpus.verify import VerifyConfig, prepare_job, verify
from kbencheval.dataset import BUNDLED_ROOT, load_bundled
from kbencheval.extract import static_check
from tests.data.corpus_fixtures import (
    KERNELBOOK_SCHEMA,
    SAKANA_SCHEMA,
    kernelbook_rows,
    write_kernelbook,
    write_sakana,
)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_kernelbook_loader_reads_its_schema(tmp_path, fmt):
    folder = write_kernelbook(tmp_path / "kb", fmt=fmt)
    if fmt == "parquet":
        assert pq.read_schema(folder / "dataset_permissive.parquet").equals(KERNELBOOK_SCHEMA)
    records, skipped = load_corpus("kernelbook", str(folder))
    assert [r.id for r in records] == ["kernelbook:101", "kernelbook:102", "kernelbook:103", "kernelbook:104"]
    assert skipped == ["kernelbook:105: no kernel (triton_code is empty)"]
    first = records[0]
    assert (first.backend, first.origin, first.license, first.entry_point) == ("triton", "kernelbook", "MIT", "ScaleShift")
    assert first.meta["stars"] == 3 and first.meta["repo_name"] == "someone/repo" and first.meta["synthetic"] is False
    assert "class ScaleShiftNew" in first.kernel_source and "get_init_inputs" in first.pytorch_source


def test_kernelllm_is_kernelbooks_corpus(tmp_path):
    with pytest.raises(CorpusError, match="is a model, not a dataset"):
        load_corpus("kernelllm", "facebook/KernelLLM")
    records, _ = load_corpus("kernelllm", str(write_kernelbook(tmp_path / "kb")), limit=2)
    assert [(r.id, r.origin) for r in records] == [("kernelllm:101", "kernelllm"), ("kernelllm:102", "kernelllm")]


def test_sakana_loader_reads_its_schema_and_splits(tmp_path):
    folder = write_sakana(tmp_path / "sakana")
    assert pq.read_schema(folder / "level_1.parquet").equals(SAKANA_SCHEMA)
    records, skipped = load_corpus("sakana", str(folder))
    assert len(records) == 1 and skipped == ["sakana:L1_3:silu_failed: no kernel (CUDA_Code is empty)"]
    r = records[0]
    assert (r.id, r.backend, r.license) == ("sakana:L1_3:silu_vectorized_base", "cuda", "CC-BY-4.0")
    assert r.meta["CUDA_Speedup_Native"] == 1.2 and r.meta["Correct"] is True
    assert load_corpus("sakana", str(folder), split="level_2") == ([], [])  # that split has no file here
    with pytest.raises(CorpusError, match="splits level_1, level_2, level_3"):
        load_corpus("sakana", str(folder), split="train")


def test_sakana_candidate_binds_the_cuda_forward(tmp_path):
    record = load_corpus("sakana", str(write_sakana(tmp_path / "s")))[0][0]
    code = convert.to_candidate_code(record)
    assert "class ModelNew(FunctionalModel)" in code and "fn=ext.forward" in code
    assert "class Model(" not in code  # the functional Model is renamed, so it cannot shadow the problem's
    report = static_check(code, "cuda")
    assert report.ok, report.violations
    assert convert.to_problem(record).source == record.pytorch_source  # already a KernelBench problem


def test_kernelbook_conversion_and_a_record_that_cannot_convert(tmp_path):
    records, _ = load_corpus("kernelbook", str(write_kernelbook(tmp_path / "kb")))
    problem = convert.to_problem(records[0])
    assert "class Model(ScaleShift):" in problem.source
    assert convert.to_candidate_code(records[0]).rstrip().endswith("super().__init__(*init_args, **init_kwargs)")
    positional = dataclasses.replace(records[0], pytorch_source=records[0].pytorch_source.replace(
        "return [[], {'scale': 3.0}]", "return [3.0]"))
    assert "class Model(ScaleShift):\n    pass" in convert.to_problem(positional).source  # KernelBench's convention
    assert convert.to_candidate_code(positional).rstrip().endswith("class ModelNew(ScaleShiftNew):\n    pass")
    broken = records[0]
    broken.kernel_source = broken.kernel_source.replace("ScaleShiftNew", "Whatever")
    job = prepare_job(broken)
    assert job.preset is not None and job.preset.status.value == "format_error"
    assert "defines no 'ScaleShiftNew' class" in job.preset.error


@pytest.mark.parametrize("argv, message", [
    (["corpus", "verify", "source=kernelbook", "path=/no/such/folder", "out=OUT"], "does not exist"),
    (["corpus", "verify", "source=sakana", "path=KB", "out=OUT"], "has no column(s) ['CUDA_Code'"),
    (["corpus", "verify", "source=stack", "out=OUT"], "is not one of kernelbook, kernelllm, sakana"),
    (["corpus", "filter", "verified=/no/such", "out=OUT"], "run `kbench corpus verify"),
])
def test_bad_input_is_one_line(tmp_path, capsys, argv, message):
    from kbencheval.cli import main

    kb = write_kernelbook(tmp_path / "kb")
    argv = [a.replace("KB", str(kb)).replace("OUT", str(tmp_path / "out")) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_renamed_benchmark_problem_is_caught_and_distinct_problems_are_not():
    refs = reference_problems(["bundled"])
    checker = Decontaminator(refs)
    src = (BUNDLED_ROOT / "level1" / "6_Softmax.py").read_text()
    renamed = re.sub(r"\bx\b", "logits", re.sub(r"\bModel\b", "RowNorm", src)).replace('"""', "# ")
    match = checker.check(renamed)
    assert match is not None and match.problem_key == "bundled:L1_6_Softmax" and match.method == "ast"
    # every bundled problem against the others: it matches only itself at the default threshold
    for problem in (p for level in (1, 2, 3) for p in load_bundled(level)):
        keys = {m.problem_key for m in checker.matches(problem.source)}
        assert keys == {f"bundled:{problem.key}"}, (problem.key, keys)


def test_verify_keeps_verdicts_resumes_and_filter_drops_what_it_should(tmp_path):
    kb = write_kernelbook(tmp_path / "kb")
    out = tmp_path / "verified"
    stats = verify(VerifyConfig(source="kernelbook", path=str(kb), out=str(out), device="cpu"))
    assert stats["evaluated"] == 4 and not stats["harness_errors"] and stats["skipped_rows"] == 1
    verdicts = {json.loads(x)["problem_key"]: json.loads(x)["status"] for x in (out / "verdicts.jsonl").read_text().splitlines()}
    assert verdicts == {"kernelbook:101": "correct", "kernelbook:102": "correct", "kernelbook:103": "incorrect",
                        "kernelbook:104": "correct"}
    again = verify(VerifyConfig(source="kernelbook", path=str(kb), out=str(out), device="cpu"))
    assert again["evaluated"] == 0 and again["already_done"] == 4

    summary = filter_corpus(FilterConfig(verified=str(out), out=str(tmp_path / "sft")))
    assert summary["kept"] == 1 and summary["dropped"] == {"verdict": 1, "dedup": 1, "decontam": 1}
    assert summary["decontam_dropped_ids"] == ["kernelbook:104"]
    dropped = {d["id"]: d for d in map(json.loads, (tmp_path / "sft" / "dropped.jsonl").read_text().splitlines())}
    assert dropped["kernelbook:104"]["matched"] == "bundled:L1_1_ReLU"
    assert dropped["kernelbook:102"]["reason"] == "same normalised source as kernelbook:101"
    rows = [json.loads(x) for x in (tmp_path / "sft" / "train.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["kernelbook:101"]
    roles = [m["role"] for m in rows[0]["messages"]]
    assert roles == ["system", "user", "assistant"] and "class ModelNew(ScaleShiftNew)" in rows[0]["messages"][2]["content"]
    assert "class Model(ScaleShift)" in rows[0]["messages"][1]["content"]


def test_fixture_rows_cover_each_filter():
    # guards the fixture itself: one row per behaviour the filter test relies on
    assert [r["uuid"] for r in kernelbook_rows()] == [101, 102, 103, 104, 105]


@pytest.mark.gpu
def test_verify_on_gpu_kernelbook_and_sakana_cuda(tmp_path):
    """Both conversions on a real GPU: KernelBook Triton rows, and Sakana's CUDA code through load_inline."""
    kb = verify(VerifyConfig(source="kernelbook", path=str(write_kernelbook(tmp_path / "kb")),
                             out=str(tmp_path / "kb_out"), device="cuda"))
    errors = [json.loads(line).get("error") for line in (tmp_path / "kb_out" / "verdicts.jsonl").read_text().splitlines()]
    assert not kb["harness_errors"] and kb["status_counts"] == {"correct": 3, "incorrect": 1}, errors
    sk = verify(VerifyConfig(source="sakana", path=str(write_sakana(tmp_path / "sakana")),
                             out=str(tmp_path / "sk_out"), device="cuda"))
    verdict = json.loads((tmp_path / "sk_out" / "verdicts.jsonl").read_text().splitlines()[0])
    assert not sk["harness_errors"] and verdict["status"] == "correct", verdict.get("error")


def test_inductor_helpers_become_public_apis_and_the_row_verifies(tmp_path):
    """KernelBook's real Triton side is Inductor output (torch._inductor imports, torch._C guards,
    _DeviceGuard): as published it breaks the allowlist; normalised, the evaluator judges it correct."""
    from kbencheval.corpus.inductor import normalise_inductor
    from kbencheval.eval.contract.device_kernels import kernel_violation
    from tests.data.corpus_fixtures import INDUCTOR_TRITON, inductor_row

    assert "torch._inductor" in static_check(INDUCTOR_TRITON).reason
    code = normalise_inductor(INDUCTOR_TRITON)
    assert static_check(code).ok and "torch._" not in code and "tl.maximum(tmp3, tmp2)" in code
    # Inductor's kernel names would read as torch.compile's kernels on the GPU: renamed, calls included
    assert "triton_poi_" not in code and code.count("kb_poi_fused_add_relu_0") == 2
    assert kernel_violation(["kb_poi_fused_add_relu_0"], []) is None
    assert kernel_violation(["triton_poi_fused_add_relu_0"], []) is not None
    assert normalise_inductor("import torch\nx = 1\n") == "import torch\nx = 1\n"  # nothing to rewrite
    kb = write_kernelbook(tmp_path / "kb", rows=[inductor_row()])
    stats = verify(VerifyConfig(source="kernelbook", path=str(kb), out=str(tmp_path / "v"), device="cpu"))
    verdict = json.loads((tmp_path / "v" / "verdicts.jsonl").read_text().splitlines()[0])
    assert stats["evaluated"] == 1 and verdict["status"] == "correct", verdict
