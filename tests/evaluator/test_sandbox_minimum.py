"""Fail closed: where the machine withholds namespaces (Docker's default seccomp profile does), untrusted
evaluation refuses with one line naming the fix, unless the missing parts are accepted by name; the
verdict then lists exactly the layers that were active.

The harness runs in a child process under a seccomp filter of the test's own that refuses what Docker's
default profile refuses a container without CAP_SYS_ADMIN: unshare, setns, mounts, namespace flags of clone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kbencheval.eval.processes.sandbox import landlock
from kbencheval.eval.processes.sandbox.minimum import MINIMUM, SANDBOX_SYSCALLS, unmet
from tests.support import ENV, REPO

CHILD = r'''
import ctypes, errno, json, sys
from kbencheval.eval.processes.sandbox import _linux as L, seccomp as S

arch = L.ARCH
clone_nr, clone3_nr = S._CLONE[arch]
prog = [(S._LD_W_ABS, S._ARCH_OFFSET), (S._JEQ, S._AUDIT_ARCH[arch], "native", "allow"),
        ("label", "native"), (S._LD_W_ABS, S._NR_OFFSET),
        (S._JEQ, clone_nr, "clone", "n0"), ("label", "n0"), (S._JEQ, clone3_nr, "enosys", "n1"), ("label", "n1")]
for i, name in enumerate(json.loads(sys.argv[2])):
    prog += [(S._JEQ, S._DENIED[arch][name], "deny", f"d{i}"), ("label", f"d{i}")]
prog += [(S._RET, S._ALLOW),
         ("label", "clone"), (S._LD_W_ABS, S._ARG0_OFFSET), (S._JSET, L.NAMESPACE_FLAGS, "deny", "allow"),
         ("label", "allow"), (S._RET, S._ALLOW),
         ("label", "deny"), (S._RET, S._ERRNO | errno.EPERM),
         ("label", "enosys"), (S._RET, S._ERRNO | errno.ENOSYS)]
insns = S.assemble(prog)
array = (S._Insn * len(insns))(*[S._Insn(*i) for i in insns])
L.prctl(L.PR_SET_NO_NEW_PRIVS, 1)
L.syscall("seccomp", ctypes.c_uint(1), ctypes.c_uint(0), ctypes.byref(S._Prog(len(insns), array)))

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator, HarnessError

relu = next(p for p in load_bundled(1) if p.problem_id == 1)
cfg = EvalConfig(device="cpu", sandbox="kernel", trials=1, stress_trials=False, timeout_s=60,
                 sandbox_accept=[a for a in sys.argv[1].split(",") if a])
try:
    with Evaluator(cfg) as ev:
        print(ev.evaluate(relu, "```python\n" + relu.solution_source + "```").to_json())
except HarnessError as e:
    print("REFUSED " + str(e))
'''


# What Docker's default profile refuses a container without CAP_SYS_ADMIN (it allows Landlock and seccomp).
DOCKER_REFUSES = [name for name in SANDBOX_SYSCALLS if not name.startswith("landlock_") and name != "seccomp"]


def run_denied(accept: list[str]) -> str:
    out = subprocess.run([sys.executable, "-c", CHILD, ",".join(accept), json.dumps(DOCKER_REFUSES)],
                         capture_output=True, text=True, env=ENV, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


# Without namespaces the rest of the minimum may still stand: writes through Landlock, where the kernel has it.
EXPECTED_UNMET = ["pid-ns", "net-ns"] + ([] if landlock.abi_version() >= 1 else ["fs-write"])


def test_denied_namespaces_refuse_with_the_fix():
    line = run_denied([])
    assert line.startswith("REFUSED "), line[:500]
    assert "\n" not in line and len(line) < 600
    assert f"lacks {', '.join(n for n in MINIMUM if n in EXPECTED_UNMET)} here" in line
    assert "seccomp" in line and "--security-opt seccomp=" in line  # the fix: the profile docker/ makes
    assert line.endswith(f"sandbox_accept={','.join(n for n in MINIMUM if n in EXPECTED_UNMET)}")


def test_accepted_weaker_sandbox_lists_exactly_the_active_layers():
    result = json.loads(run_denied(list(MINIMUM)))
    assert result["status"] == "correct", result["error"]
    active = [layer for layer in result["sandbox"] if not layer.startswith("missing ")]
    landlock_layers = [name for name in active if name.startswith("landlock-")]
    assert sorted(set(active) - set(landlock_layers)) == sorted(
        ["process-group", "timeout", "leftover-sweep", "env-allowlist", "memory-rlimit", "no-caps", "no-new-privs",
         "seccomp"])
    for lost in ("user-ns", "mount-ns", "net-ns", "pid-ns", "private-proc"):
        assert any(line.startswith(f"missing {lost}:") for line in result["sandbox"]), lost
    assert result["checks"]["sandbox_weaker"] == {"accepted_missing": EXPECTED_UNMET, "by": "sandbox_accept"}


@pytest.mark.parametrize("active, missing", [
    (["pid-ns", "net-ns", "landlock-fs"], []),
    (["bwrap", "pid-ns"], []),  # bubblewrap: read-only root and its own network namespace
    (["ro-root", "net-ns"], ["pid-ns"]),
    (["landlock-fs", "seccomp", "no-caps"], ["pid-ns", "net-ns"]),
])
def test_minimum_sandbox_parts(active, missing):
    assert unmet(active) == missing


def test_sandbox_accept_names_parts_of_the_minimum():
    from kbencheval.config import ConfigError
    from kbencheval.eval import EvalConfig

    with pytest.raises(ConfigError, match="name some of pid-ns, fs-write, net-ns"):
        EvalConfig(sandbox_accept=["landlock"])


def test_docker_profile_adds_exactly_what_the_sandbox_lacks(tmp_path):
    """docker/seccomp_profile.py on a profile shaped as Docker's default: its rules unchanged, plus one rule
    allowing the sandbox's syscalls that the profile allows only with CAP_SYS_ADMIN or not at all."""
    default = {"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
        {"names": ["read", "landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self", "seccomp"],
         "action": "SCMP_ACT_ALLOW"},
        {"names": ["mount", "unshare", "setns"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
    ]}
    (tmp_path / "default.json").write_text(json.dumps(default))
    out = subprocess.run([sys.executable, str(REPO / "docker" / "seccomp_profile.py"), str(tmp_path / "default.json")],
                         capture_output=True, text=True, check=True, env=ENV)
    profile = json.loads(out.stdout)
    assert profile["syscalls"][:2] == default["syscalls"] and profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert profile["syscalls"][2]["names"] == ["unshare", "setns", "mount", "umount2", "mount_setattr", "open_tree",
                                               "move_mount"]
    assert len(profile["syscalls"]) == 3
