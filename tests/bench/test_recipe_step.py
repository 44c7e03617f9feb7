"""benchmarks/recipe_step.py's memory watch: the run's own GPUs, by the run's numbering (issue 47's layout runs
beside other work on a shared node).   pytest tests/bench/test_recipe_step.py"""

from __future__ import annotations

import importlib.util

from tests.support import REPO

spec = importlib.util.spec_from_file_location("recipe_step", REPO / "benchmarks" / "recipe_step.py")
recipe_step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipe_step)


def test_visible_gpus_reads_plain_indices_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert recipe_step.visible_gpus() == [2, 3]
    for unusable in ("", "GPU-3365fb54-70df", "0,MIG-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", unusable)
        assert recipe_step.visible_gpus() is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert recipe_step.visible_gpus() is None


def test_peaks_are_reported_by_the_runs_index_with_the_physical_one_beside():
    watch = recipe_step.GpuMemory.__new__(recipe_step.GpuMemory)
    watch.physical, watch.peak_mib, watch.total_mib = [2, 3], {2: 5376, 3: 4247}, {2: 143771, 3: 143771}
    report = watch.report()
    assert list(report) == ["0", "1"]
    assert report["0"]["physical_gpu"] == 2 and report["0"]["peak_gib"] == 5376 / 1024
    watch.physical, watch.peak_mib, watch.total_mib = None, {0: 1024}, {0: 2048}  # every GPU: physical numbering
    assert watch.report() == {"0": {"peak_gib": 1.0, "total_gib": 2.0, "physical_gpu": 0}}
