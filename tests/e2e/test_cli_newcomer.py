"""What a newcomer meets in the first hour with `kbench check` on a CPU-only machine: a GPU device torch
cannot use, a broken .py candidate and a mixed-up problem are one-line answers before any evaluator
starts; a plain check prints no server chatter and one short sandbox line.   pytest tests/e2e/test_cli_newcomer.py"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import torch

from kbencheval.bench.common import resolve_devices
from kbencheval.config import ConfigError
from kbencheval.dataset import load_bundled
from kbencheval.eval.cli import check as check_cli, serve as serve_cli
from kbencheval.eval.trusted import harness
from kbencheval.eval import EvalConfig
from kbencheval.eval import EvalResult, Status
from kbencheval.extract import extract_code

REPO = Path(__file__).resolve().parents[2]
RELU = next(p for p in load_bundled(1) if p.problem_id == 1)
SANDBOX = ["process-group", "timeout", "leftover-sweep", "env-allowlist", "memory-rlimit", "bwrap", "mount-ns",
           "ipc-ns", "net-ns", "uts-ns", "private-shm", "pid-ns", "private-proc", "no-caps", "no-new-privs",
           "landlock-fs", "landlock-net", "landlock-scope", "seccomp", "private-tmp", "ro-scratch-outside-job",
           "missing user-ns: /proc/self/uid_map is not writable here"]


class _NoEvaluator:
    def __init__(self, *args, **kwargs):
        raise AssertionError("an Evaluator was started")


class _CannedEvaluator:
    """Stands in for the real one: the verdict it returns is all the output code needs."""

    def __init__(self, cfg, **kwargs):
        self.cfg = cfg

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def evaluate(self, problem, text):
        return EvalResult(Status.CORRECT, problem=problem.key, device="cpu", compiled=True, correct=True,
                          sandbox=list(SANDBOX))


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def no_server(monkeypatch, tmp_path):
    """No `kbench serve-eval` at the default socket, whatever runs on this machine."""
    monkeypatch.setattr(check_cli, "default_socket_path", lambda device: tmp_path / "none" / "eval.sock")


def _check(capsys, *args) -> tuple[int, str, str]:
    code = check_cli.main(["--level", "1", "--problem-id", "1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _kernel(tmp_path, source: str, name: str = "cand.py") -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


@pytest.mark.parametrize("main", [check_cli.main, serve_cli.main], ids=["check", "serve-eval"])
def test_a_gpu_device_without_a_gpu_fails_at_once_and_names_the_fix(main, no_gpu, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(harness, "_Server", _NoEvaluator)  # no fork server may start
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    kernel = _kernel(tmp_path, RELU.solution_source)
    args = ["--level", "1", "--problem-id", "1", "--kernel", kernel] if main is check_cli.main else \
        ["--socket", str(tmp_path / "s.sock")]
    t0 = time.monotonic()
    try:
        code = main([*args, "--device", "cuda"])
    finally:  # serve-eval installs its own handlers
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - t0 < 5
    assert len(err.strip().splitlines()) == 1, err
    assert "no CUDA/ROCm GPU visible to torch" in err and "--device cpu" in err and "Traceback" not in err


def test_every_evaluator_and_device_list_checks_the_device_first(no_gpu, monkeypatch):
    monkeypatch.setattr(harness, "_Server", _NoEvaluator)
    with pytest.raises(ConfigError, match="device=cuda:0: no CUDA/ROCm GPU visible to torch"):
        harness.Evaluator(EvalConfig(device="cuda:0"))
    with pytest.raises(ConfigError, match="no CUDA/ROCm GPU visible.*device=cpu"):
        resolve_devices("cuda")  # kbench eval, run-one, corpus verify
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="device=cuda:2: torch sees 1 GPU"):
        harness.Evaluator(EvalConfig(device="cuda:2"))


@pytest.mark.parametrize("source, status, error", [
    ("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n", "compile_error", "syntax error at line 2"),
    ("import torch\ndef f(:\n    pass\n", "format_error", "the code defines no class ModelNew"),
    ("import torch\n\nclass Model(torch.nn.Module):\n    pass\n", "format_error", "the code defines no class ModelNew"),
])
def test_a_py_candidate_that_cannot_run_gets_the_accurate_verdict_at_once(source, status, error, monkeypatch,
                                                                          tmp_path, capsys):
    monkeypatch.setattr(harness, "Evaluator", _NoEvaluator)
    monkeypatch.setattr(check_cli, "_served", _NoEvaluator)
    code, out, _ = _check(capsys, "--kernel", _kernel(tmp_path, source), "--json")
    result = EvalResult.from_json(out)
    assert code == 0 and (result.status.value, result.problem) == (status, RELU.key)
    assert result.error.startswith(error), result.error
    # the same file as LLM text (not .py) is still read as a response
    code, out, _ = _check(capsys, "--kernel", _kernel(tmp_path, source, "cand.txt"), "--json")
    assert EvalResult.from_json(out).error == "no code block found in the response"


def test_a_py_file_is_code_even_when_its_strings_hold_fences():
    source = '"""A ReLU kernel. Usage:\n\n```python\nout = ModelNew()(x)\n```\n"""\n' + RELU.solution_source
    assert extract_code(source) == source.strip() + "\n"


def test_a_plain_check_prints_no_server_line_and_one_short_sandbox_line(no_server, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(harness, "Evaluator", _CannedEvaluator)
    kernel = _kernel(tmp_path, RELU.solution_source)
    code, out, err = _check(capsys, "--kernel", kernel)
    assert code == 0 and err == ""
    sandbox = [line for line in out.splitlines() if line.startswith("sandbox")]
    assert sandbox == ["sandbox: 21 layers, missing user-ns (--verbose lists them)"], out
    assert len(out.splitlines()) <= 3, out

    code, out, err = _check(capsys, "--kernel", kernel, "--verbose")
    assert "no evaluation server at" in err and "evaluating locally" in err
    assert "landlock-scope" in out and "/proc/self/uid_map" in out
    code, out, _ = _check(capsys, "--kernel", kernel, "--json")
    assert EvalResult.from_json(out).sandbox == SANDBOX  # the JSON keeps the full record


def test_ref_with_level_or_problem_id_is_a_usage_error(tmp_path, capsys):
    kernel = _kernel(tmp_path, RELU.solution_source)
    for extra in (["--level", "1", "--problem-id", "1"], ["--problem-id", "1"]):
        code = check_cli.main(["--ref", str(REPO / "kbencheval/problems/level1/1_ReLU.py"), *extra, "--kernel", kernel])
        err = capsys.readouterr().err
        assert code == 2 and err.strip() == \
            "kbench check: name the problem once: --ref FILE, or --level L --problem-id N (not both)"
