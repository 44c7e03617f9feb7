"""The candidate sandbox, built from what the Linux kernel gives; no bubblewrap, root or not.

Layers (names as `EvalResult.sandbox` lists them):
    user-ns, mount-ns, ipc-ns, net-ns, uts-ns    the fork server's namespaces (namespaces.py)
    pid-ns                  judge = PID 1 of a fresh PID namespace, workers forked into it
    private-proc            a /proc that shows only that namespace
    private-tmp, private-shm, ro-root, ro-scratch-outside-job   mounts (namespaces.py)
    no-caps, no-new-privs   every capability set emptied (caps.py)
    landlock-fs, landlock-read, landlock-net, landlock-scope   writes, reads (reads.py), TCP, signals (landlock.py)
    seccomp                 syscalls a kernel never needs (seccomp.py)
    env-allowlist           the harness's environment never enters (env.py)
The fork server probes each at start with a throwaway worker and uses only those that work; a
worker that then fails to apply one of them refuses to run the candidate.
"""

from __future__ import annotations

import json
import os

from kbencheval.eval.processes.sandbox import caps, landlock, reads, seccomp
from kbencheval.eval.processes.sandbox._linux import PR_SET_PDEATHSIG, prctl
from kbencheval.eval.processes.sandbox.namespaces import ServerSandbox, enter_worker, keep_paths

WORKER_LAYERS = ["pid-ns", "private-proc", "no-caps", "no-new-privs", "landlock-fs", "landlock-read", "landlock-net",
                 "landlock-scope", "seccomp"]

__all__ = ["ServerSandbox", "prepare_worker", "lock_down", "probe", "WORKER_LAYERS"]


def prepare_worker(plan: dict, layers: list[str], job_dir: str, kind: str) -> list[str]:
    """Right after fork, single-threaded: mounts, then every capability dropped."""
    done = enter_worker(plan, layers, job_dir, kind)
    if "no-caps" in layers:
        caps.drop_all()
        if not caps.all_dropped():
            raise OSError(1, f"capabilities still held after dropping them: {caps.current()}")
        done += ["no-caps", "no-new-privs"]
    return done


def lock_down(layers: list[str], writable: list[str], readable: list[str] | None = None) -> list[str]:
    """Landlock, then seccomp: after CUDA is initialised on GPUs, before any candidate code. Reads are
    limited to `writable` and `readable` beyond the allow-list of reads.py."""
    done = []
    # The host's /tmp holds other users' and jobs' files. A private /tmp still shows the interpreter's and
    # this checkout's folders (keep_paths: CI clones into /tmp), and a rule on /tmp would grant reads beneath
    # them all: with reads restricted, a candidate's temp files go to TMPDIR, its job folder, alone.
    if "private-tmp" not in layers or "landlock-read" in layers:
        writable = [w for w in writable if w != "/tmp"]
    if "landlock-fs" in layers:
        done += landlock.restrict(writable, readable=reads.allowed(readable or []) if "landlock-read" in layers else None)
    if "seccomp" in layers:
        seccomp.install()
        done.append("seccomp")
    return done


def probe(server: ServerSandbox, plan: dict, probe_dir: str) -> tuple[list[str], dict[str, str]]:
    """Try every worker layer in a throwaway child; returns (active layers, missing layer -> reason)."""
    if plan.get("mode", "none") == "none":
        return [], {}
    wanted = list(server.active) + WORKER_LAYERS
    if "mount-ns" in server.active:
        wanted += ["private-tmp", "ro-scratch-outside-job"]
    missing: dict[str, str] = {}
    for _ in range(len(wanted)):
        result = _probe_once(server, plan, probe_dir, wanted)
        if "error" not in result:
            active = list(dict.fromkeys(result["layers"]))
            unsupported = {w: "not supported by this kernel" for w in wanted if w not in active}
            return active, {**unsupported, **missing, **server.missing}
        layer = result["layer"]
        missing[layer] = result["error"]
        wanted = [w for w in wanted if w != layer]
    return [], {"sandbox": "no worker layer could be applied"}


def probe_child(payload: dict) -> None:
    """A namespace helper handler: apply the wanted layers, write what happened to the probe folder."""
    plan, wanted, probe_dir = payload["plan"], payload["wanted"], payload["probe_dir"]
    try:
        report = {"layers": _apply_for_probe(plan, wanted, probe_dir)}
    except _LayerFailed as e:
        report = {"layer": e.layer, "error": e.reason}
    with open(os.path.join(probe_dir, "report.json"), "w") as f:
        json.dump(report, f)


def _probe_once(server: ServerSandbox, plan: dict, probe_dir: str, wanted: list[str]) -> dict:
    report = os.path.join(probe_dir, "report.json")
    if os.path.exists(report):
        os.unlink(report)
    payload = {"plan": plan, "wanted": wanted, "probe_dir": probe_dir}
    try:
        if "pid-ns" in wanted:
            server.run_to_end("probe", payload, PROBE_TIMEOUT_S)
        else:
            pid = os.fork()
            if pid == 0:
                probe_child(payload)
                os._exit(0)
            os.waitpid(pid, 0)
    except OSError as e:
        return {"layer": "pid-ns", "error": e.strerror or str(e)}
    try:
        with open(report) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"layer": "pid-ns", "error": "the probe process died"}


# A loaded machine (many evaluators starting at once on a few cores) can take tens of seconds to run the
# probe; a probe cut short would count as a missing layer and refuse every evaluation that follows.
PROBE_TIMEOUT_S = 180.0


class _LayerFailed(Exception):
    def __init__(self, layer: str, reason: str):
        self.layer, self.reason = layer, reason


def _apply_for_probe(plan: dict, wanted: list[str], probe_dir: str) -> list[str]:
    done = [w for w in wanted if w in ("user-ns", "mount-ns", "ipc-ns", "net-ns", "uts-ns", "private-shm", "ro-root",
                                       "pid-ns", "hidden-files")]
    from kbencheval.eval.processes.sandbox import _linux as L

    steps = [
        ("private-proc", lambda: L.mount("proc", "/proc", "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)),
        ("private-tmp", lambda: L.tmpfs_over("/tmp", keep_paths(plan["scratch"]))),
        ("ro-scratch-outside-job", lambda: (L.mount_setattr(plan["scratch"], set_=L.MOUNT_ATTR_RDONLY, recursive=True),
                                            L.mount(probe_dir, probe_dir, None, L.MS_BIND),
                                            L.mount_setattr(probe_dir, clear=L.MOUNT_ATTR_RDONLY))),
        ("no-caps", lambda: (caps.drop_all(), caps.all_dropped() or _raise("capabilities still held"))),
        ("landlock-fs", lambda: done.extend(landlock.restrict([probe_dir, "/tmp", "/dev/shm"],
                                                              readable=reads.allowed([]))[1:])),
        ("seccomp", seccomp.install),
    ]
    if "mount-ns" in wanted:
        _step("mount-ns", lambda: L.unshare(L.CLONE_NEWNS))
    for name, fn in steps:
        if name in wanted:
            _step(name, fn)
            done.append(name)
            if name == "no-caps":
                done.append("no-new-privs")
    return [w for w in wanted if w in done]


def _raise(message: str):
    raise OSError(1, message)


def _step(layer: str, fn) -> None:
    try:
        fn()
    except OSError as e:
        raise _LayerFailed(layer, e.strerror or str(e)) from None
