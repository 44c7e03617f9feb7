"""Drop every capability (also for root) and set no_new_privs, so nothing exec'd can regain one."""

from __future__ import annotations

import ctypes

from kbencheval.eval.processes.sandbox import _linux as L

# SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE and their locks: uid 0
# (root, or root inside a user namespace) gets no capabilities back on execve.
SECUREBITS_LOCKED_DOWN = 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 63


def drop_all() -> None:
    """Bounding, ambient, inheritable, permitted and effective sets emptied; raises if any step fails."""
    try:
        L.prctl(L.PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN)
    except OSError:
        pass  # needs CAP_SETPCAP; without it there is no capability to regain either
    for cap in range(_last_cap() + 1):
        try:
            L.prctl(L.PR_CAPBSET_DROP, cap)
        except OSError as e:
            if e.errno != 22:  # EINVAL: a capability this kernel does not know
                raise
    L.prctl(L.PR_CAP_AMBIENT, L.PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit data words
    data = (_CapData * 2)()
    L.syscall("capset", ctypes.byref(header), ctypes.byref(data))
    L.prctl(L.PR_SET_NO_NEW_PRIVS, 1)


def current() -> dict[str, int]:
    """The capability sets of this thread, as the kernel reports them."""
    out = {}
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith("Cap"):
                key, value = line.split(":")
                out[key] = int(value, 16)
    return out


def all_dropped() -> bool:
    return not any(current().values()) and L.prctl(L.PR_GET_NO_NEW_PRIVS) == 1
