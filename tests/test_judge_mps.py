"""Judges under one MPS server (scripts/judge_mps.sh, forkserver.judge_mps_env): only judges join it,
no candidate sees where it is, and bad settings say what to change. The GPU test starts a real daemon."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kbencheval.eval.forkserver import judge_mps_env
from kbencheval.eval.harness import EvalConfig, Evaluator
from kbencheval.eval.result import Status
from kbencheval.eval.sandbox.env import JUDGE_MPS_ENV
from kbencheval.eval.server import HarnessError
from tests.test_adversarial import RELU


@pytest.mark.parametrize("kind, joins", [("judge", True), ("candidate", False), ("compile", False)])
def test_only_a_judge_joins_the_judges_mps_server_and_no_child_keeps_its_address(monkeypatch, kind, joins):
    monkeypatch.setenv(JUDGE_MPS_ENV, "/run/judges-mps")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    judge_mps_env(kind)
    assert JUDGE_MPS_ENV not in os.environ
    assert os.environ.get("CUDA_MPS_PIPE_DIRECTORY") == ("/run/judges-mps" if joins else None)


def test_the_judges_mps_server_on_the_cpu_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(JUDGE_MPS_ENV, str(tmp_path))
    with pytest.raises(HarnessError, match=f"{JUDGE_MPS_ENV}=.*unset it on the CPU"):
        Evaluator(EvalConfig(device="cpu"))


# A candidate that fails to load if it can find the judges' MPS server.
LOOKS_FOR_MPS = ("import os\nassert not {'KBENCH_JUDGE_MPS_PIPE', 'CUDA_MPS_PIPE_DIRECTORY'} & set(os.environ), "
                 "'found the MPS pipe'\n") + RELU.solution_source


@pytest.mark.gpu
def test_judges_join_a_real_mps_server_and_candidates_do_not(monkeypatch, tmp_path):
    if not shutil.which("nvidia-cuda-mps-control"):
        pytest.skip("nvidia-cuda-mps-control not on PATH")
    pipe = tmp_path / "mps"
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "judge_mps.sh")
    monkeypatch.setenv(JUDGE_MPS_ENV, str(pipe))
    with pytest.raises(HarnessError, match="no MPS control daemon there"):
        Evaluator(EvalConfig(device="cuda"))
    started = subprocess.run(["bash", script, "start", str(pipe)], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and started.stdout.strip() == f"export {JUDGE_MPS_ENV}={pipe}", started
    try:
        with Evaluator(EvalConfig(device="cuda", iters=20, timeout_s=120)) as ev:
            result = ev.evaluate(RELU, "```python\n" + LOOKS_FOR_MPS + "```")
        assert result.status == Status.CORRECT, result.error
        log = (pipe / "log" / "control.log").read_text()
        assert "NEW CLIENT" in log  # the judge's context is the MPS server's
    finally:
        subprocess.run(["bash", script, "stop", str(pipe)], capture_output=True, timeout=60)
