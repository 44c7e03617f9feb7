"""`eval_harness.py --compare-kernelbench`: the adapter to KernelBench's own harness, against stand-in
checkouts of both layouts (the real harness needs CUDA; it runs on a GPU only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import kernelbench_compare  # noqa: E402

NEW_LAYOUT = '''
class R:
    def __init__(self, **k): self.__dict__.update(k)
def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                            num_perf_trials=10, measure_performance=False, device=None, backend="cuda"):
    assert (num_correct_trials, num_perf_trials, backend, measure_performance) == (5, 100, "triton", True)
    ok = "ModelNew" in custom_model_src and "BROKEN" not in custom_model_src
    return R(compiled=True, correctness=ok, runtime=0.5, ref_runtime=1.5)
'''
OLD_LAYOUT = '''
class R:
    def __init__(self, **k): self.__dict__.update(k)
def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                            num_perf_trials=10, verbose=False, measure_performance=False, device=None):
    # no backend argument and no ref_runtime: the adapter times the reference as its own candidate
    return R(compiled=True, correctness=True, runtime=0.8 if "FAST" in custom_model_src else 2.0)
'''
REF = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
NEW = "import torch\nclass ModelNew(torch.nn.Module):  # FAST\n    pass\n"


def checkout(tmp_path: Path, layout: str) -> Path:
    eval_py = tmp_path / ("src/kernelbench/eval.py" if layout == NEW_LAYOUT else "src/eval.py")
    eval_py.parent.mkdir(parents=True)
    (eval_py.parent / "__init__.py").write_text("")
    eval_py.write_text(layout)
    return kernelbench_compare.check_checkout(str(tmp_path))


def test_new_layout_reports_its_speedup_and_failures(tmp_path):
    root = checkout(tmp_path, NEW_LAYOUT)
    ok = kernelbench_compare.evaluate(root, REF, NEW, "cuda:0")
    assert ok["correct"] and ok["speedup"] == pytest.approx(3.0) and not ok["error"] and ok["wall_s"] > 0
    broken = kernelbench_compare.evaluate(root, REF, NEW + "# BROKEN\n", "cuda:0")
    assert not broken["correct"] and broken["speedup"] is None
    assert kernelbench_compare.agreement(3.3, ok["speedup"]) == pytest.approx(1.1)


def test_old_layout_times_the_reference_itself(tmp_path):
    root = checkout(tmp_path, OLD_LAYOUT)
    result = kernelbench_compare.evaluate(root, REF, NEW, "cuda:0")
    assert result["speedup"] == pytest.approx(2.5) and result["ref_runtime_ms"] == 2.0


def test_a_missing_checkout_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no KernelBench checkout there"):
        kernelbench_compare.check_checkout(str(tmp_path))


@pytest.mark.slow
def test_eval_harness_runs_both_harnesses(tmp_path):
    root = checkout(tmp_path / "kb", NEW_LAYOUT)
    out = tmp_path / "eh.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "eval_harness.py"), "--device", "cpu", "--limit",
                           "1", "--passes", "1", "--compare-kernelbench", str(root), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["problems"][0]["kernelbench"]["speedup"] == pytest.approx(3.0)
    assert data["summary"]["kernelbench_correct"] == 1 and data["summary"]["kernelbench_candidates_per_min"] > 0
