"""Landlock: writes only beneath the given folders, reads only beneath an allow-list (reads.py), no TCP,
no signals or abstract sockets outside.

Applied by the process to itself (and inherited by everything it starts). On GPUs it must come
after CUDA is initialised: CUDA writes under /proc while it starts (MEASURED.md).
"""

from __future__ import annotations

import ctypes
import os
import stat

from kbencheval.eval.processes.sandbox import _linux as L

EXECUTE, READ_FILE, READ_DIR = 1 << 0, 1 << 2, 1 << 3
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 1, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM, REFER, TRUNCATE = 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
FILE_RIGHTS = EXECUTE | READ_FILE | WRITE_FILE | TRUNCATE  # what a rule on a file (not a folder) may carry


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version() -> int:
    try:
        return L.syscall("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except OSError:
        return 0


def write_rights(abi: int) -> int:
    rights = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
              | MAKE_BLOCK | MAKE_SYM)
    if abi >= 2:
        rights |= REFER  # Triton's cache renames files across folders
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def restrict(writable: list[str], devices: list[str] = ("/dev",), readable: list[str] | None = None) -> list[str]:
    """Apply the rules to this process; returns the layer names now active. Needs no_new_privs.
    `readable`: the read allow-list (reads.allowed); None leaves reads as they are."""
    abi = abi_version()
    if abi < 1:
        raise OSError(38, "the kernel has no Landlock (or it is disabled)")
    rights = write_rights(abi)
    reads = READ_RIGHTS if readable is not None else 0
    attr = _RulesetAttr(rights | reads, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = L.syscall("landlock_create_ruleset", ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    device_rights = WRITE_FILE | (TRUNCATE if abi >= 3 else 0)
    rules = [(p, rights | reads) for p in writable] + [(p, device_rights | reads) for p in devices] + \
        [(p, reads) for p in readable or []]
    try:
        for path, allowed in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= FILE_RIGHTS
                rule = _PathBeneath(allowed, fd)
                L.syscall("landlock_add_rule", ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule),
                          ctypes.c_uint32(0))
            finally:
                os.close(fd)
        L.syscall("landlock_restrict_self", ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return ["landlock-fs"] + (["landlock-read"] if reads else []) + (["landlock-net"] if abi >= 4 else []) + \
        (["landlock-scope"] if abi >= 6 else [])
