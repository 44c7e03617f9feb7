"""The minimum sandbox for untrusted code, and the one-line refusal where a machine cannot give it.

    process isolation   pid-ns     the judge's PID namespace: a candidate sees and signals only its own
    filesystem writes   fs-write   Landlock's write rules, the read-only root (mount namespace) or bubblewrap
    no network          net-ns     a network namespace (the fork server's, or bubblewrap's)

The fork server keeps every layer its probe finds working; the harness then refuses to evaluate unless
all three stand, or the user named the missing ones in `EvalConfig.sandbox_accept`.
"""

from __future__ import annotations

import os

MINIMUM: dict[str, tuple[str, ...]] = {
    "pid-ns": ("pid-ns",),
    "fs-write": ("landlock-fs", "ro-root", "bwrap"),
    "net-ns": ("net-ns", "bwrap"),
}
# The syscalls the sandbox makes that a container's seccomp profile may refuse. Docker's default refuses
# the first seven without CAP_SYS_ADMIN; docker/seccomp_profile.py adds to it whichever of these it lacks.
SANDBOX_SYSCALLS = ("unshare", "setns", "mount", "umount2", "mount_setattr", "open_tree", "move_mount",
                    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "seccomp")
DOCKER_FIX = "docker run --security-opt seccomp=seccomp-sandbox.json --security-opt apparmor=unconfined ... " \
             "(see docker/seccomp_profile.py)"


def unmet(active: list[str]) -> list[str]:
    """The parts of the minimum that none of the active layers provide."""
    return [need for need, layers in MINIMUM.items() if not set(layers) & set(active)]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _seccomp_filtered() -> bool:
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("Seccomp:"):
            return line.split()[1] != "0"
    return False


def fix_hint() -> str:
    """What most likely keeps user namespaces away here, as the command that gives them back."""
    in_container = os.path.exists("/.dockerenv") or any(w in _read("/proc/1/cgroup") for w in ("docker", "containerd"))
    if _seccomp_filtered():
        if in_container:
            return f"this container's seccomp filter refuses namespaces and mounts: run with `{DOCKER_FIX}`"
        return f"a seccomp filter on this process refuses namespaces and mounts: lift it (in Docker: `{DOCKER_FIX}`)"
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "unprivileged user namespaces are off: `sysctl -w kernel.unprivileged_userns_clone=1`"
    if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return "AppArmor restricts user namespaces: `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        return "user namespaces are off: `sysctl -w user.max_user_namespaces=15000`"
    if in_container:
        return f"the container withholds namespaces: run with `{DOCKER_FIX}`"
    return "see docs/evaluator.md, 'Where the sandbox holds'"


def refusal(refused: list[str], missing: dict[str, str]) -> str:
    """One line: what is missing, why, the fix, and the setting that accepts the weaker sandbox."""
    # each refused layer's own reason, and user-ns's (the others often rest on it)
    named = [k for k in (*refused, "user-ns") if k in missing]
    why = "; ".join(f"{k}: {missing[k]}" for k in dict.fromkeys(named)) or "not provided"
    return (f"the sandbox for untrusted code lacks {', '.join(refused)} here ({why}); "
            f"{fix_hint()}; or accept the weaker sandbox with sandbox_accept={','.join(refused)}")
