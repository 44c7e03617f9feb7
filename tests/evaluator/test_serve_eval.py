"""`kbench serve-eval` and `kbench check` against it, as real processes on the CPU: served verdicts equal
local ones and come faster; mismatched configs and missing servers fall back with one line; malformed
requests are refused while the server keeps serving; SIGTERM leaves no socket and no process.
    pytest tests/evaluator/test_serve_eval.py -s      (-s prints the measured wall times)"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig
from kbencheval.eval.cli.client import ping, request_eval
from kbencheval.eval.cli.service import ServiceUnavailable, bind_socket, config_mismatch, default_socket_path, private_dir
from tests.support import ENV
from tests.evaluator.test_harness_lifecycle import _alive, _descendants

RELU = next(p for p in load_bundled(1) if p.problem_id == 1)
BROKEN = RELU.solution_source.replace("return y", "return y[None, 5]")
SERVER_CFG = ["trials=2"]


def _start_server(sock: Path, log: Path, cfg: list[str] = SERVER_CFG) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "kbencheval.cli", "serve-eval", "--device", "cpu", "--socket",
                             str(sock), *cfg], stdout=subprocess.DEVNULL, stderr=log.open("w"), env=ENV)
    deadline = time.monotonic() + 120
    while True:
        try:
            if ping(sock, timeout_s=5)["ok"]:
                return proc
        except ServiceUnavailable:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"kbench serve-eval did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    sock = folder / "eval.sock"
    proc = _start_server(sock, folder / "server.log")
    yield sock
    _stop(proc)


def _check(kernel_text: str, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    kernel = tmp_path / f"k{abs(hash(kernel_text))}.py"
    kernel.write_text(kernel_text)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kbencheval.cli", "check", "--ref", RELU.path, "--kernel", str(kernel),
                        "--json", *args], capture_output=True, text=True, timeout=300, env=ENV)
    return r, time.monotonic() - t0


def test_served_verdicts_equal_local_ones_and_come_faster(server, tmp_path):
    local, local_s = _check(RELU.solution_source, tmp_path, "--socket", str(server), "--no-server", *SERVER_CFG)
    first, _ = _check(RELU.solution_source, tmp_path, "--socket", str(server), *SERVER_CFG)
    second, served_s = _check(RELU.solution_source, tmp_path, "--socket", str(server), *SERVER_CFG)
    print(f"\nkbench check wall time: local (cold Evaluator) {local_s:.2f} s, served (warm) {served_s:.2f} s")
    for r in (local, first, second):
        assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 1, r.stderr  # exactly one EvalResult
        assert r.stderr == "", r.stderr
    local, first, second = (json.loads(r.stdout) for r in (local, first, second))
    assert local["status"] == first["status"] == second["status"] == "correct"
    assert "served_by" not in local["checks"]
    assert first["checks"]["served_by"]["socket"] == str(server)
    assert second["checks"]["served_by"]["request"] > first["checks"]["served_by"]["request"]
    assert served_s < local_s

    bad_local, _ = _check(BROKEN, tmp_path, "--no-server", *SERVER_CFG)
    bad_served, _ = _check(BROKEN, tmp_path, "--socket", str(server), *SERVER_CFG)
    bad_local, bad_served = json.loads(bad_local.stdout), json.loads(bad_served.stdout)
    assert bad_local["status"] == bad_served["status"] == "runtime_error"
    assert "served_by" in bad_served["checks"] and "index 5 is out of bounds" in bad_served["error"]


def test_config_mismatch_and_missing_server_fall_back_with_one_line(server, tmp_path):
    r, _ = _check(RELU.solution_source, tmp_path, "--socket", str(server), "trials=3")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "correct"
    assert "served_by" not in json.loads(r.stdout)["checks"]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "another config (trials: server 2, here 3)" in r.stderr and "evaluating locally" in r.stderr

    missing = tmp_path / "none.sock"
    r, _ = _check(RELU.solution_source, tmp_path, "--socket", str(missing), *SERVER_CFG)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "correct"
    assert r.stderr.strip() == (f"kbench check: no evaluation server at {missing} (start one with `kbench serve-eval "
                                f"--device cpu --socket {missing} trials=2`); evaluating locally")


def _raw(sock: Path, payload: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock))
        s.sendall(payload)
        return json.loads(s.makefile("rb").readline())


def test_malformed_requests_are_refused_and_the_server_keeps_serving(server):
    cfg = EvalConfig(device="cpu", trials=2)
    good = {"op": "evaluate", "candidate": RELU.solution_source, "config": {"device": "cpu", "trials": 2},
            "problem": {"source": RELU.source, "name": "ReLU", "level": 1, "problem_id": 1}}
    bad = [b"garbage\n", b"[1, 2]\n", b'{"op": "evaluate"}\n', b'{"op": "reboot"}\n',
           json.dumps({**good, "config": {"trialz": 2}}).encode() + b"\n",
           json.dumps({**good, "problem": {"source": "x = 1\n"}}).encode() + b"\n",
           json.dumps({**good, "code": "0" * 16}).encode() + b"\n"]
    replies = [_raw(server, line) for line in bad]
    assert [r["refused"] for r in replies] == ["bad_request"] * (len(bad) - 1) + ["code_mismatch"]
    assert "did you mean 'trials'" in replies[4]["message"] and "no Model" in replies[5]["message"]
    assert _raw(server, json.dumps(good).encode() + b"\n")["status"] == "correct"  # a raw good line is served too

    # concurrent clients wait their turn; each gets its own verdict
    results = []
    threads = [threading.Thread(target=lambda: results.append(request_eval(server, RELU, RELU.solution_source, cfg)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [r.status.value for r in results] == ["correct", "correct"]
    assert len({r.checks["served_by"]["request"] for r in results}) == 2


def test_a_busy_server_queues_clients_within_the_wait_they_chose(tmp_path):
    sock = tmp_path / "eval.sock"
    proc = _start_server(sock, tmp_path / "server.log", ["trials=2", "timeout_s=4"])
    cfg = EvalConfig(trials=2, timeout_s=4)
    looping = RELU.solution_source.replace("        x = x.contiguous()", "        while True:\n            pass")
    outcomes = {}

    def client(name, text, wait_s):
        try:
            outcomes[name] = request_eval(sock, RELU, text, cfg, wait_s=wait_s).status.value
        except ServiceUnavailable as e:
            outcomes[name] = str(e)

    try:
        hog = threading.Thread(target=client, args=("hog", looping, 60))
        hog.start()
        deadline = time.monotonic() + 30
        while not ping(sock)["busy"] and time.monotonic() < deadline:
            time.sleep(0.05)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:  # sends, then leaves before its turn
            gone.connect(str(sock))
            request = {"op": "evaluate", "candidate": RELU.solution_source, "config": {"trials": 2, "timeout_s": 4},
                       "problem": {"source": RELU.source}}
            gone.sendall(json.dumps(request).encode() + b"\n")
        waiters = [threading.Thread(target=client, args=(name, RELU.solution_source, wait))
                   for name, wait in (("impatient", 0.5), ("patient", 60))]
        for t in waiters:
            t.start()
        for t in [hog, *waiters]:
            t.join(timeout=120)
        assert outcomes["hog"] == "timeout" and outcomes["patient"] == "correct"
        assert "waited" in outcomes["impatient"] and "the client allowed 0.5 s" in outcomes["impatient"]
        assert ping(sock)["served"] == 2  # the client that left was skipped
    finally:
        _stop(proc)


def test_sigterm_removes_the_socket_and_leaves_no_process(tmp_path):
    sock = tmp_path / "eval.sock"
    proc = _start_server(sock, tmp_path / "server.log")
    try:
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert request_eval(sock, RELU, RELU.solution_source, EvalConfig(trials=2)).correct  # judge started
        started = _descendants(proc.pid)
        assert len(started) >= 2, started  # fork server (maybe inside bwrap) and judge
    finally:
        code = _stop(proc)
    assert code == 0 and not sock.exists()
    assert "stopped after 1 evaluations" in (tmp_path / "server.log").read_text()
    _assert_all_gone(started)


def _running(module: str, pids: set[int]) -> bool:
    """Whether one of `pids` runs `python -m module` (directly or under bubblewrap)."""
    for pid in pids:
        try:
            if module in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0"):
                return True
        except OSError:
            pass
    return False


def _assert_all_gone(pids: set[int]) -> None:
    deadline = time.time() + 5
    while _alive(pids) and time.time() < deadline:
        time.sleep(0.1)
    assert _alive(pids) == set()


def test_sigterm_during_the_start_cleans_up_too(tmp_path):
    """A signal while the Evaluator starts is held until the start is done, then everything is closed."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "kbencheval.cli", "serve-eval", "--socket", str(tmp_path / "e.sock")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**ENV, "TMPDIR": str(scratch)})
    deadline = time.monotonic() + 60
    # Wait for the fork server itself: the start also runs short-lived children (the bubblewrap probe),
    # which may be gone by the time the signal comes.
    while not _running("kbencheval.eval.processes.forkserver", started := _descendants(proc.pid)):
        assert proc.poll() is None, f"serve-eval exited during its start: {proc.stderr.read()}"
        assert time.monotonic() < deadline, "no fork server 60 s after kbench serve-eval started"
        time.sleep(0.05)
    code = _stop(proc)
    assert code == 0, proc.stderr.read()
    assert not (tmp_path / "e.sock").exists() and list(scratch.iterdir()) == []  # the Evaluator's scratch is gone
    _assert_all_gone(started)


def test_socket_paths_are_private_per_user_and_device(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_socket_path("cuda") == default_socket_path("cuda:0") == tmp_path / "kbench" / "eval-cuda0.sock"
    assert default_socket_path("cpu") == tmp_path / "kbench" / "eval-cpu.sock"
    private_dir(tmp_path / "kbench", create=True)
    assert stat.S_IMODE(os.stat(tmp_path / "kbench").st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(ServiceUnavailable, match="not a private folder of yours .*mode 0o755"):
        private_dir(shared, create=False)

    path = tmp_path / "kbench" / "eval-cpu.sock"
    listener = bind_socket(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(ServiceUnavailable, match="already answers"):
        bind_socket(path)
    listener.close()  # a dead server's socket file is cleared by the next one
    bind_socket(path).close()

    assert config_mismatch(EvalConfig(device="cuda"), EvalConfig(device="cuda:0")) == []
    assert config_mismatch(EvalConfig(), EvalConfig(trials=3, allowed_ops=["aten.add"])) == ["trials", "allowed_ops"]
