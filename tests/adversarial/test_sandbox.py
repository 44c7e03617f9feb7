"""The kernel sandbox's promises (kbencheval/eval/processes/sandbox), each tested by an attacker followed by an
honest control in the same Evaluator, with the static checks off and bubblewrap not used
(sandbox=kernel), so that only the run-time layers stand between the attack and the host.

Threat table (docs/evaluator.md): "no files, network, processes outside scratch", "one candidate cannot
reach the next", "feedback is no channel" (host paths)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval import Status
from kbencheval.eval.processes.sandbox import WORKER_LAYERS
from tests.adversarial.test_adversarial import RELU, candidate

SECRET = f"tf-secret-{uuid.uuid4().hex}"
HONEST = "```python\n" + RELU.solution_source + "```"
# A forward that is correct, so an attack that is not stopped would come back `correct`.
CORRECT_FORWARD = """
        def forward(self, x):
            y = torch.empty_like(x)
            launch_relu(x, y)
            return y
"""


# The worker's audit hook (a tripwire) denies os.kill, open-for-write and ctypes.CDLL; an attacker goes
# around it through ctypes.pythonapi, already loaded, whose symbols include libc's. So these attacks
# reach the kernel, and only the sandbox stops them.
LIBC = """
import os, ctypes, signal
libc = ctypes.pythonapi
libc.__errno_location.restype = ctypes.POINTER(ctypes.c_int)
def errno():
    return libc.__errno_location()[0]
def kill(pid, sig):
    return libc.kill(ctypes.c_int(pid), ctypes.c_int(sig))
def write_file(path, text='left behind'):
    fd = libc.open(path.encode(), ctypes.c_int(0o1101), ctypes.c_int(0o644))   # O_WRONLY|O_CREAT|O_TRUNC
    if fd < 0:
        return False
    libc.write(ctypes.c_int(fd), text.encode(), ctypes.c_size_t(len(text)))
    libc.close(ctypes.c_int(fd))
    return True
"""


def attack(setup: str, forward: str = CORRECT_FORWARD) -> str:
    body = LIBC + "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    body += "".join(f"        {line}\n" for line in setup.strip("\n").splitlines())
    return candidate(body + forward.replace("\n        ", "\n    "))


# benchmarks/sandbox_h100_check.py runs this file on a GPU with KBENCH_SANDBOX_TEST_DEVICE=cuda.
DEVICE = os.environ.get("KBENCH_SANDBOX_TEST_DEVICE", "cpu")


def kernel_sandbox_evaluator():
    return Evaluator(EvalConfig(device=DEVICE, sandbox="kernel", static_checks=False, memory_limit_gb=4,
                                accept_cpu_tripwires_only=DEVICE == "cpu",
                                timeout_s=30 if DEVICE == "cpu" else 120, iters=10))


@pytest.fixture(scope="module")
def ev():
    os.environ["TF_TEST_SECRET"] = SECRET  # the harness's environment carries a secret
    try:
        with kernel_sandbox_evaluator() as evaluator:
            yield evaluator
    finally:
        os.environ.pop("TF_TEST_SECRET", None)


def honest_is_correct(ev):
    result = ev.evaluate(RELU, HONEST)
    assert result.status == Status.CORRECT, result.error
    return result


def require_pid_namespace(ev):
    """Attacks that signal every process they can see run only where that means their own namespace."""
    if "pid-ns" not in ev.protections:
        pytest.skip(f"no PID namespace here ({ev.protections}); this attack would reach host processes")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sandbox_lists_its_layers(ev):
    result = honest_is_correct(ev)
    assert "env-allowlist" in result.sandbox and "process-group" in result.sandbox
    named = {entry.split(":")[0].removeprefix("missing ") for entry in result.sandbox}
    expected = {"user-ns", "mount-ns", "ipc-ns", "net-ns", "ro-root", "private-shm", "private-tmp", *WORKER_LAYERS}
    assert expected <= named, expected - named  # each layer is either active or missing with its reason
    if subprocess.run(["unshare", "--user", "--pid", "--fork", "--mount-proc", "--net", "--mount", "true"],
                      capture_output=True).returncode == 0:
        assert expected <= set(result.sandbox), [e for e in result.sandbox if e.startswith("missing")]


def test_kill_the_fork_server_and_everything_visible(ev):
    require_pid_namespace(ev)
    server, judge = ev.process_ids()["fork_server"], ev.process_ids()["judge"]
    result = ev.evaluate(RELU, attack("""
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSEGV):
            kill(int(p), sig)
kill(os.getppid(), signal.SIGKILL)   # 0 here: the parent is outside this PID namespace, so this kills our own group
"""))
    assert not result.correct
    assert alive(server) and alive(judge)
    assert result.checks["harness_restarts"] == {"fork_server": 0, "judge": 0}
    honest_is_correct(ev)


def test_kill_the_judge(ev):
    require_pid_namespace(ev)
    judge = ev.process_ids()["judge"]
    result = ev.evaluate(RELU, attack("""
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSEGV, signal.SIGUSR1):
    kill(1, sig)   # the judge is PID 1 of the candidate's PID namespace
visible = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
raise RuntimeError(f'judge still alive; visible processes {visible}')
"""))
    assert result.status == Status.COMPILE_ERROR and "judge still alive" in result.error, result.error
    assert alive(judge) and result.checks["harness_restarts"]["judge"] == 0
    honest_is_correct(ev)


def test_kill_another_process(ev):
    require_pid_namespace(ev)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        ev.evaluate(RELU, attack(f"""
for sig in (signal.SIGKILL, signal.SIGTERM):
    kill({sleeper.pid}, sig)
kill(-1, signal.SIGKILL)   # everything this process may signal
"""))
        time.sleep(0.2)
        assert sleeper.poll() is None
        honest_is_correct(ev)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_next_candidates_worker_is_not_there_yet(ev):
    """The next candidate's worker is forked before that candidate is known (launch.py), but only after
    this one's processes are gone: a candidate sees no process but the judge and its own."""
    require_pid_namespace(ev)
    honest_is_correct(ev)
    assert (spare := ev.process_ids()["spare"]) and alive(spare)  # the spare the attack's worker came from ...
    result = ev.evaluate(RELU, attack("""
me = os.getsid(0)
others = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != 1:
        try:
            if os.getsid(int(p)) != me:
                others.append(int(p))
        except OSError:
            pass
raise RuntimeError(f'others={others}')
"""))
    assert result.status == Status.COMPILE_ERROR and "others=[]" in result.error, result.error
    assert (spare := ev.process_ids()["spare"]) and alive(spare)  # ... and the next one, forked after it was gone
    honest_is_correct(ev)


def test_remount_root_read_write(ev, tmp_path):
    target = os.path.abspath(f"tf_remount_escape_{uuid.uuid4().hex}.txt")  # in the checkout
    result = ev.evaluate(RELU, attack(f"""
MS_REMOUNT, MS_BIND = 32, 4096
mounts = []
for path in (b'/', {os.path.dirname(target).encode()!r}):
    for flags in (MS_REMOUNT | MS_BIND, MS_REMOUNT):
        mounts.append((libc.mount(None, path, None, ctypes.c_ulong(flags), None), errno()))
wrote = write_file({target!r})
raise RuntimeError(f'mounts {{mounts}}; wrote {{wrote}}, errno {{errno()}}')
"""))
    assert not os.path.exists(target)
    assert result.status == Status.COMPILE_ERROR and "wrote False" in result.error, result.error
    honest_is_correct(ev)


def test_write_to_shared_places(ev):
    name = f"tf_escape_{uuid.uuid4().hex}"
    home = os.path.expanduser("~")
    targets = [f"/dev/shm/{name}", f"/var/tmp/{name}", f"{home}/{name}", f"/tmp/{name}"]
    result = ev.evaluate(RELU, attack(f"""
for path in {targets!r}:
    write_file(path)
"""))
    assert [t for t in targets if os.path.exists(t)] == []
    # What it could write (its private /dev/shm and /tmp) is gone before the next candidate runs.
    leftover = ev.evaluate(RELU, attack(f"""
found = [p for p in ('/dev/shm/{name}', '/tmp/{name}') if os.path.exists(p)]
if found:
    raise RuntimeError(f'left behind: {{found}}')
"""))
    assert result.status == leftover.status == Status.CORRECT, (result.error, leftover.error)
    honest_is_correct(ev)


def test_no_network(ev):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    result = ev.evaluate(RELU, attack(f"""
fd = libc.socket(2, 1, 0)   # AF_INET, SOCK_STREAM
err = errno()
if fd >= 0:   # sockaddr_in for 127.0.0.1:{port}
    addr = (2).to_bytes(2, 'little') + ({port}).to_bytes(2, 'big') + bytes([127, 0, 0, 1]) + bytes(8)
    libc.connect(fd, addr, 16)
raise RuntimeError(f'socket {{fd}} errno {{err}}')
"""))
    try:
        server.accept()
        connected = True
    except OSError:
        connected = False
    server.close()
    assert not connected
    assert result.status == Status.COMPILE_ERROR and "socket -1 errno 1" in result.error, result.error  # EPERM
    honest_is_correct(ev)


def test_environment_secrets_stay_outside(ev):
    result = ev.evaluate(RELU, attack("""
seen = [str(dict(os.environ))]
for p in os.listdir('/proc'):
    try:
        seen.append(open(f'/proc/{p}/environ', 'rb').read().decode(errors='replace'))
    except OSError:
        pass
raise RuntimeError(' '.join(seen))
"""))
    assert result.status == Status.COMPILE_ERROR
    assert SECRET not in result.to_json()
    assert "TF_TEST_SECRET" not in result.to_json()
    honest_is_correct(ev)


def test_error_text_has_no_host_paths(ev):
    result = ev.evaluate(RELU, attack("raise RuntimeError(f'at {os.path.abspath(torch.__file__)} and {os.getcwd()}')"))
    assert torch_dir() not in result.error and "…/__init__.py" in result.error, result.error


def torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__)


def test_scratch_and_triton_cache_do_not_carry_over(ev):
    """What one candidate leaves in its folder, the shared Triton cache, or scratch, the next never sees."""
    name = f"tf_left_{uuid.uuid4().hex}"
    writer = ev.evaluate(RELU, attack(f"""
written = [folder for folder in (os.getcwd(), os.path.dirname(os.getcwd()), os.environ['TRITON_CACHE_DIR'],
                                  os.environ['KBENCH_TRITON_SHARED_CACHE'])
           if write_file(os.path.join(folder, '{name}'), 'poison')]
assert os.environ['KBENCH_TRITON_SHARED_CACHE'] not in written, 'the shared cache is writable'
"""))
    assert writer.status == Status.CORRECT, writer.error
    reader = ev.evaluate(RELU, attack(f"""
import glob
found = glob.glob(os.path.join(os.path.dirname(os.getcwd()), '**', '{name}'), recursive=True)
found += glob.glob(os.path.join(os.environ['KBENCH_TRITON_SHARED_CACHE'], '**', '{name}'), recursive=True)
if found:
    raise RuntimeError(f'left behind: {{found}}')
"""))
    assert reader.status == Status.CORRECT, reader.error
    honest_is_correct(ev)


def test_harness_survives_its_processes_dying():
    with kernel_sandbox_evaluator() as ev:
        honest_is_correct(ev)
        spare = ev.process_ids()["spare"]
        os.kill(spare, signal.SIGKILL)  # the next candidate's worker dies before its candidate comes
        deadline = time.monotonic() + 30  # gone: SIGKILL is delivered asynchronously (CI caught the race)
        while ev.process_ids()["spare"] == spare and time.monotonic() < deadline:
            time.sleep(0.01)
        assert honest_is_correct(ev) and ev.process_ids()["spare"] not in (spare, None)
        os.kill(ev.process_ids()["judge"], signal.SIGKILL)  # the judge dies between candidates (and the spare with it)
        assert honest_is_correct(ev).checks["harness_restarts"]["judge"] == 1
        os.kill(ev.process_ids()["fork_server"], signal.SIGKILL)  # the fork server, and the judge with it
        time.sleep(0.2)
        restarted = honest_is_correct(ev).checks
        assert restarted["harness_restarts"]["fork_server"] == 1
        assert restarted["harness_restarted"]["fork_server"].startswith("exit status -9")  # why, on its verdict
        assert "harness_restarted" not in honest_is_correct(ev).checks  # only the candidate it happened before
        looping = attack("pass", forward="""
        def forward(self, x):
            while True:
                pass
""")
        server = ev.process_ids()["fork_server"]
        killer = subprocess.Popen(["sh", "-c", f"sleep 3; kill -9 {server}"])
        result = ev.evaluate(RELU, looping)  # the fork server dies while this candidate runs
        killer.wait()
        assert result.status == Status.RUNTIME_ERROR, (result.status, result.error)
        result = honest_is_correct(ev)
        assert result.checks["harness_restarts"]["fork_server"] == 2


@pytest.mark.gpu
def test_poisoned_triton_cache_does_not_reach_the_next_candidate():
    """The attacker compiles the honest solution's kernel, then overwrites every compiled artifact it can reach."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: the Triton interpreter caches no binaries")
    # The honest solution itself, compiled and run once, then every compiled file it can reach overwritten.
    poison = "```python\n" + RELU.solution_source + "\n" + LIBC + """
_x = torch.randn(4096, device='cuda')
ModelNew()(_x)
torch.cuda.synchronize()
def _poison(root):  # every file it can reach, and a new one in every folder
    return sum(write_file(os.path.join(_folder, _f), 'poison') for _folder, _, _files in os.walk(root)
               for _f in _files + ['planted'])
# The judge's layer, the harness's launchers and the kernels it compiled from candidates' TTIR.
_shared = os.environ['KBENCH_TRITON_SHARED_CACHE'].split(os.pathsep) + [os.environ['KBENCH_KERNELS_FOLDER']]
_found = sum(len(_files) for _root in _shared for _, _, _files in os.walk(_root))
raise RuntimeError(f"poisoned private={_poison(os.environ['TRITON_CACHE_DIR'])} "
                   f"shared={sum(map(_poison, _shared))} of {_found} in {len(_shared)} layers")
```"""
    with Evaluator(EvalConfig(device="cuda", sandbox="kernel", static_checks=False, timeout_s=120)) as ev:
        honest_is_correct(ev)  # its launcher and its kernel, built by the harness into their folders
        ev.drain_compiles()
        result = ev.evaluate(RELU, poison)
        assert "poisoned private=" in result.error and " shared=0 of " in result.error, result.error
        assert " in 3 layers" in result.error and " of 0 in" not in result.error, result.error
        assert "private=0" not in result.error, result.error  # the attack did overwrite its own compiled kernel
        after = honest_is_correct(ev)
        assert after.checks["precompile"]["kernels_cached"] == 1, after.checks["precompile"]  # the harness's build


def test_triton_cache_layers(tmp_path, monkeypatch):
    """Reads fall through to the shared folder; every write lands in the private one."""
    from kbencheval.eval.processes.sandbox.tritoncache import SHARED_ENV, LayeredCacheManager

    shared, private = tmp_path / "shared", tmp_path / "private"
    (shared / "KEY").mkdir(parents=True)
    (shared / "KEY" / "k.cubin").write_bytes(b"trusted")
    (shared / "KEY" / "__grp__k.json").write_text('{"child_paths": {"k.cubin": "%s"}}' % (shared / "KEY" / "k.cubin"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(private))
    monkeypatch.setenv(SHARED_ENV, str(shared))
    cache = LayeredCacheManager("KEY")
    assert cache.get_file("k.cubin") == str(shared / "KEY" / "k.cubin")
    assert cache.get_group("k.json") == {"k.cubin": str(shared / "KEY" / "k.cubin")}
    written = cache.put(b"candidate's", "k.cubin")
    assert written == str(private / "KEY" / "k.cubin")
    assert cache.get_file("k.cubin") == written  # the private layer wins for this candidate only
    assert (shared / "KEY" / "k.cubin").read_bytes() == b"trusted"
    assert LayeredCacheManager("OTHER").get_file("k.cubin") is None


def test_the_fork_server_warms_tritons_compiler_without_touching_cuda(tmp_path):
    """forkserver.preload with a compute capability: one compile-only kernel for that GPU, so forked
    workers inherit a compiler that has compiled once. It must leave CUDA and Triton's driver
    untouched (a parent that initialised CUDA forks children that cannot) and no cache behind."""
    probe = f"""
import os, sys
from kbencheval.eval.processes.forkserver import preload
preload({{"compile_arch": 90, "scratch": {str(tmp_path)!r}}})
import torch
from triton.backends.nvidia.compiler import get_ptxas_version
from triton.runtime import driver
assert get_ptxas_version.cache_info().currsize == 1, get_ptxas_version.cache_info()  # ptxas ran for sm_90
assert not torch.cuda.is_initialized() and driver._active is None
assert os.listdir({str(tmp_path)!r}) == [], os.listdir({str(tmp_path)!r})
print("warmed")
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "warmed" in out.stdout and "not warmed" not in out.stderr, out.stderr[-2000:]
