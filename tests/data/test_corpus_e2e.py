"""End to end on CPU: raw KernelBook-schema corpus -> verify -> filter -> `smart sft` trains on it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.data.corpus_fixtures import write_kernelbook
from tests.support import ENV, REPO


@pytest.mark.slow
def test_verify_filter_then_smart_sft(tmp_path, tiny_model):
    kb = write_kernelbook(tmp_path / "kb")
    verified, dataset, out = tmp_path / "verified", tmp_path / "sft_data", tmp_path / "sft_run"

    def run(*args):
        proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=ENV, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    run("kbencheval.cli", "corpus", "verify", "source=kernelbook", f"path={kb}", f"out={verified}", "device=cpu")
    run("kbencheval.cli", "corpus", "filter", f"verified={verified}", f"out={dataset}")
    assert json.loads((dataset / "manifest.json").read_text())["kept"] == 1
    proc = run("smart.cli", "sft", "configs/sft_tiny_cpu.yaml", f"model_path={tiny_model}", f"out_dir={out}",
               "num_steps=2", "batch_size=1", f"data.sft_jsonl={dataset}")
    assert "sft step 2/2" in proc.stdout + proc.stderr
    assert (out / "hf" / "config.json").is_file()
