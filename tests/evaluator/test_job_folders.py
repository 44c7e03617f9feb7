"""Every job gets writable folders of its own for what torch and Triton cache: HOME, TMPDIR, Triton's cache,
torch extensions and torch.compile's cache. On the GPU an honest torch.compile failed with "Read-only file
system: <scratch>/torchinductor_root": torch had written the fork server's choice of folder into the
environment before the fork.   pytest tests/evaluator/test_job_folders.py"""

from __future__ import annotations

import os
import tempfile

import pytest

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator, Status

RELU = next(p for p in load_bundled(1) if p.problem_id == 1)


@pytest.mark.parametrize("kind", ["candidate", "worker", "judge"])
def test_torch_compile_cache_is_the_jobs_own_whatever_the_fork_server_picked(kind, tmp_path, monkeypatch):
    from kbencheval.eval.processes import forkserver

    monkeypatch.setattr(os, "environ", dict(os.environ, TORCHINDUCTOR_CACHE_DIR="/read-only/torchinductor_root"))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.gettempdir())
    job_dir = tmp_path / "job"
    forkserver.job_env({"job_dir": str(job_dir), "kind": kind}, {}, [])
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TMPDIR", "HOME"):
        folder = os.environ[name]
        assert folder.startswith(str(job_dir)) and os.path.isdir(folder), (name, folder)


def test_a_candidate_can_write_torch_compiles_cache():
    writes_cache = RELU.solution_source + '''
import os
from torch._inductor.runtime.cache_dir_utils import cache_dir
with open(os.path.join(cache_dir(), "probe"), "w") as f:
    f.write("ok")
'''
    with Evaluator(EvalConfig(device="cpu", trials=1, stress_trials=False, timeout_s=60, static_checks=False,
                              accept_cpu_tripwires_only=True)) as ev:
        result = ev.evaluate(RELU, "```python\n" + writes_cache + "```")
    assert result.status == Status.CORRECT, result.error
