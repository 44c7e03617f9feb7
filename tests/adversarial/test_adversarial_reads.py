"""Reads (issue #43): a candidate cannot read a planted secret in a home folder, the project checkout,
another job's folder or the bundled solutions, by any route we know, and no secret reaches a verdict,
its feedback or a log; what the judge says about an output is not a channel. Static checks on and off.

Threat table (docs/evaluator.md): "no reads beyond what a kernel needs", "feedback is no channel".
"""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

import kbencheval
from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval import Status
from tests.adversarial.test_adversarial import HEADER, RELU

SOLVED = next(p for p in load_bundled(1) if p.problem_id == 10)  # its solution is what the candidates read


@pytest.fixture(scope="module")
def evaluators():
    cfg = dict(device="cpu", timeout_s=20, memory_limit_gb=4, sandbox="kernel")
    runtime_only_cfg = EvalConfig(**cfg, static_checks=False, accept_cpu_tripwires_only=True)  # refused otherwise
    with Evaluator(EvalConfig(**cfg)) as strict, Evaluator(runtime_only_cfg) as runtime_only:
        yield {True: strict, False: runtime_only}


@pytest.fixture(scope="module")
def planted(evaluators):
    """name -> (path, the bytes a candidate reading it would leak). Removed afterwards."""
    made, places = [], {}
    token = lambda: f"KBSECRET{uuid.uuid4().hex[:16]}"  # noqa: E731
    home = Path(tempfile.mkdtemp(prefix=".kbench-secret-", dir=Path.home()))  # the harness's real home folder
    checkout = Path(kbencheval.__file__).resolve().parents[1] / f".kbench-secret-{uuid.uuid4().hex[:8]}"
    checkout.mkdir()
    made += [home, checkout]
    for name, folder in [("home", home), ("checkout", checkout)]:
        places[name] = folder / "credentials"
        places[name].write_text(token() + "\n")
    for static, ev in evaluators.items():  # another job's folder in the evaluator's scratch
        other = ev.scratch / f"job-other-{static}"
        other.mkdir()
        (other / "outputs.txt").write_text(token() + "\n")
        places[f"other_job_{static}"] = other / "outputs.txt"
    solution = Path(SOLVED.path).parents[1] / "solutions" / Path(SOLVED.path).parent.name / Path(SOLVED.path).name
    assert solution.read_text().strip() == SOLVED.solution_source.strip()
    places["solutions"] = solution
    secrets = {}
    for name, path in places.items():
        data = path.read_bytes()
        start = data.find(b"KBSECRET") if b"KBSECRET" in data else data.find(b"@triton.jit\ndef ") + 16
        secrets[name] = (str(path), start, data[start:start + 20])
    yield secrets
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def leaked(text: str, secret: bytes) -> bool:
    """The secret as text, hex, or its bytes as a run of numbers (str of a uint8 tensor, a shape)."""
    numbers = " ".join(re.findall(r"\d+", text))
    return (secret.decode() in text or secret.hex() in text or secret[:12].decode() in text
            or " ".join(str(b) for b in secret[:8]) in numbers)


def everything_said(ev: Evaluator, result) -> str:
    """The verdict, and every log the evaluator keeps (its scratch folder's files)."""
    logs = [p.read_text(errors="replace") for p in ev.scratch.rglob("*.log") if p.is_file()]
    return result.to_json() + "\n".join(logs)


def body(code: str) -> str:
    return "```python\n" + HEADER + code + "\n```"


# Static checks on: torch.from_file is allowed by the scan, so a read through it reaches the run-time side.
FROM_FILE = '''
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch_relu(x, y)
        t = torch.from_file(__PATH__, size=__START__ + 20, dtype=torch.uint8)[__START__:]
        raise RuntimeError("leak " + str(t))
        return y
'''

# Static checks off: every route we know, each one's result (or its denial) raised as the error text.
ROUTES = r'''
import mmap, os, subprocess
import numpy as np

def routes(path, start):
    n = start + 20
    job = os.getcwd()
    def symlink():
        os.symlink(path, os.path.join(job, "link"))
        return open(os.path.join(job, "link"), "rb").read()[start:n]
    def hardlink():  # an O_PATH open is no read; linking it through /proc would be one
        os.link(f"/proc/self/fd/{os.open(path, os.O_PATH)}", os.path.join(job, "hard"), follow_symlinks=True)
        return open(os.path.join(job, "hard"), "rb").read()[start:n]
    def raw():
        fd = os.open(path, os.O_RDONLY)
        return os.read(fd, n)[start:n]
    yield "open", lambda: open(path, "rb").read()[start:n]
    yield "from_file", lambda: bytes(torch.from_file(path, size=n, dtype=torch.uint8)[start:].tolist())
    yield "numpy", lambda: np.fromfile(path, dtype=np.uint8)[start:n].tobytes()
    yield "mmap", lambda: mmap.mmap(os.open(path, os.O_RDONLY), 0, prot=mmap.PROT_READ)[start:n]
    yield "proc_root", lambda: open("/proc/self/root" + path, "rb").read()[start:n]
    yield "symlink", symlink
    yield "hardlink", hardlink
    yield "proc_fd", lambda: open(f"/proc/self/fd/{os.open(path, os.O_PATH)}", "rb").read()[start:n]
    yield "listdir", lambda: " ".join(os.listdir(os.path.dirname(path))).encode()
    yield "cc", lambda: subprocess.run(["cc", "-E", "-P", "-x", "c", path], capture_output=True).stdout
    yield "raw", raw

class ModelNew(nn.Module):
    def forward(self, x):
        found = []
        for name, read in routes(__PATH__, __START__):
            try:
                found.append(f"{name}={read()!r}")
            except Exception as e:
                found.append(f"{name}=denied")
        print("\n".join(found))  # stdout: the worker's log
        raise RuntimeError(" ".join(found))
'''

# The harness reads the worker's log when a candidate dies: swapped for a symlink to the secret.
LOG_SWAP = '''
import os
class ModelNew(nn.Module):
    def forward(self, x):
        os.unlink("worker.log")
        os.symlink(__PATH__, "worker.log")
        os._exit(3)
'''

# A shape that spells the secret: an empty tensor, one dimension per byte.
SHAPE = '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.dims = [int(v) for v in torch.from_file(__PATH__, size=__START__ + 20, dtype=torch.uint8)[__START__:__START__ + 8]]
    def forward(self, x):
        y = torch.empty_like(x)
        launch_relu(x, y)
        return y[:0].reshape(self.dims + [0])  # no elements, in memory a kernel wrote
'''

PLACES = ["home", "checkout", "other_job", "solutions"]


def _case(planted, place: str, static: bool):
    path, start, secret = planted[f"{place}_{static}" if place == "other_job" else place]
    return path, start, secret


@pytest.mark.parametrize("static", [True, False], ids=["static_on", "static_off"])
@pytest.mark.parametrize("place", PLACES)
def test_from_file_read_fails_and_leaks_nothing(evaluators, planted, place, static):
    ev = evaluators[static]
    path, start, secret = _case(planted, place, static)
    result = ev.evaluate(RELU, body(FROM_FILE.replace("__PATH__", repr(path)).replace("__START__", str(start))))
    assert not result.correct
    assert not leaked(everything_said(ev, result), secret), result.error
    assert result.checks["reads"].startswith("landlock allow-list") and "landlock-read" in result.sandbox


@pytest.mark.slow
@pytest.mark.parametrize("place", PLACES)
def test_every_read_route_is_denied(evaluators, planted, place):
    ev = evaluators[False]
    path, start, secret = _case(planted, place, False)
    result = ev.evaluate(RELU, body(ROUTES.replace("__PATH__", repr(path)).replace("__START__", str(start))))
    said = everything_said(ev, result)
    assert not leaked(said, secret), result.error
    routes = dict(re.findall(r"(\w+)=(denied|b'[^']*'|b\"[^\"]*\")", result.error))
    readable = {k: v for k, v in routes.items() if v not in ("denied", "b''")}
    assert set(routes) == {"open", "from_file", "numpy", "mmap", "proc_root", "symlink", "hardlink", "proc_fd",
                           "listdir", "cc", "raw"} and not readable, result.error
    assert result.status == Status.RUNTIME_ERROR, result.error


@pytest.mark.parametrize("place", ["home", "solutions"])
def test_a_log_swapped_for_a_symlink_is_not_followed(evaluators, planted, place):
    ev = evaluators[False]
    path, _, secret = _case(planted, place, False)
    result = ev.evaluate(RELU, body(LOG_SWAP.replace("__PATH__", repr(path))))
    assert result.status == Status.RUNTIME_ERROR
    assert not leaked(everything_said(ev, result), secret), result.error


@pytest.mark.parametrize("static", [True, False], ids=["static_on", "static_off"])
def test_an_output_shape_is_not_a_channel(evaluators, planted, static):
    """Even a secret in reach (here the other job's, before the allow-list) cannot leave by a shape:
    the judge's message tells the reference's shape and the candidate's number of dimensions only."""
    ev = evaluators[static]
    path, start, secret = _case(planted, "home", static)
    result = ev.evaluate(RELU, body(SHAPE.replace("__PATH__", repr(path)).replace("__START__", str(start))))
    assert not result.correct and not leaked(everything_said(ev, result), secret), result.error
    # The channel itself, with bytes the candidate has: nine dimensions of chosen sizes.
    spelled = [75, 66, 83, 69, 67, 82, 69, 84]
    code = SHAPE.replace("[int(v) for v in torch.from_file(__PATH__, size=__START__ + 20, dtype=torch.uint8)[__START__:__START__ + 8]]",
                         str(spelled))
    result = ev.evaluate(RELU, body(code))
    assert result.status == Status.INCORRECT and "has 9 dimensions, expected 2" in result.error, result.error
    assert not leaked(result.to_json(), bytes(spelled)), result.error


def test_feedback_is_bounded(evaluators):
    code = '''
class ModelNew(nn.Module):
    def forward(self, x):
        raise type("E" * 5000, (Exception,), {})("x" * 100000)
'''
    result = evaluators[False].evaluate(RELU, body(code))
    assert result.status == Status.RUNTIME_ERROR and 0 < len(result.error) <= 1000 and len(result.feedback) <= 1000


@pytest.mark.gpu
@pytest.mark.parametrize("static", [True, False], ids=["static_on", "static_off"])
def test_reads_are_denied_on_the_gpu(gpu_eval, gpu_runtime_only, planted, static):
    """The same reads on a GPU worker (Landlock after CUDA's start), and an honest control that still compiles."""
    ev = gpu_eval if static else gpu_runtime_only
    for place in ("home", "checkout", "solutions"):
        path, start, secret = _case(planted, place, static)
        result = ev.evaluate(RELU, body(FROM_FILE.replace("__PATH__", repr(path)).replace("__START__", str(start))))
        assert not result.correct and not leaked(everything_said(ev, result), secret), result.error
        assert "landlock-read" in result.sandbox
    if not static:
        path, start, secret = _case(planted, "home", False)
        result = ev.evaluate(RELU, body(ROUTES.replace("__PATH__", repr(path)).replace("__START__", str(start))))
        assert not leaked(everything_said(ev, result), secret), result.error
    honest = ev.evaluate(RELU, "```python\n" + RELU.solution_source + "```")
    assert honest.correct, honest.error
