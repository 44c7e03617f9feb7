"""The raw Linux calls the sandbox needs, through ctypes (Python 3.11 has no os.unshare/os.setns)."""

from __future__ import annotations

import ctypes
import os
import platform

libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP = 0x10000000, 0x20000000, 0x40000000, 0x02000000
NAMESPACE_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MOUNT_ATTR_RDONLY = 1
AT_FDCWD, AT_RECURSIVE = -100, 0x8000

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 28, 38, 39
PR_SET_CHILD_SUBREAPER, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 36, 47, 4

ARCH = platform.machine()
# Syscall numbers that glibc may not wrap. The newer ones (>= 424) are the same on every architecture.
_NR = {
    "x86_64": {"capset": 126, "seccomp": 317},
    "aarch64": {"capset": 91, "seccomp": 277},
}.get(ARCH, {})
_NR.update({"mount_setattr": 442, "landlock_create_ruleset": 444, "landlock_add_rule": 445,
            "landlock_restrict_self": 446})


def check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def syscall(name: str, *args) -> int:
    if name not in _NR:
        raise OSError(38, f"{name}: no syscall number known for {ARCH}")
    libc.syscall.restype = ctypes.c_long
    return check(libc.syscall(ctypes.c_long(_NR[name]), *args), name)


def unshare(flags: int) -> None:
    check(libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    check(libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
          f"mount {source or fstype} on {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def mount_setattr(path: str, *, set_: int = 0, clear: int = 0, recursive: bool = False) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    syscall("mount_setattr", ctypes.c_int(AT_FDCWD), path.encode(), ctypes.c_uint(flags), ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)))


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return check(libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                            ctypes.c_ulong(0), ctypes.c_ulong(0)), f"prctl({option})")


_NR.update({"open_tree": 428, "move_mount": 429})
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 4


def tmpfs_over(target: str, keep: list[str], options: str = "mode=1777") -> None:
    """A fresh tmpfs on `target`, with the given paths beneath it (scratch, this checkout) bound back in."""
    keep = sorted({p for p in keep if p.startswith(target.rstrip("/") + "/") and os.path.isdir(p)})
    kept = []
    for path in keep:
        if any(path.startswith(k + "/") for k, _ in kept):
            continue  # already inside a kept tree
        fd = syscall("open_tree", ctypes.c_int(AT_FDCWD), path.encode(),
                     ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE))
        kept.append((path, fd))
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options)
    try:
        for path, fd in kept:
            os.makedirs(path, exist_ok=True)
            syscall("move_mount", ctypes.c_int(fd), b"", ctypes.c_int(AT_FDCWD), path.encode(),
                    ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))
    except OSError:
        check(libc.umount2(target.encode(), ctypes.c_int(2)), f"umount {target}")  # MNT_DETACH: as before
        raise
    finally:
        for _, fd in kept:
            os.close(fd)
