"""A seccomp filter for what a kernel benchmark never needs, as raw BPF (no libseccomp needed).

Denied with EPERM: debugging other processes, mounting, new namespaces, kernel modules, BPF,
keyrings, perf events, clock and host settings, and every socket family but AF_UNIX. `clone3` gets
ENOSYS so that libc falls back to `clone`, whose flags the filter can read. Installed on every
thread at once (TSYNC), after CUDA is initialised.
"""

from __future__ import annotations

import ctypes
import errno

from kbencheval.eval.processes.sandbox import _linux as L

AF_UNIX = 1
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_DENIED = {
    "x86_64": dict(
        ptrace=101, process_vm_readv=310, process_vm_writev=311, mount=165, umount2=166, pivot_root=155,
        chroot=161, unshare=272, setns=308, init_module=175, finit_module=313, delete_module=176,
        kexec_load=246, kexec_file_load=320, bpf=321, keyctl=250, add_key=248, request_key=249, reboot=169,
        swapon=167, swapoff=168, perf_event_open=298, userfaultfd=323, open_by_handle_at=304, open_tree=428,
        move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, quotactl=179,
        acct=163, settimeofday=164, clock_settime=227, clock_adjtime=305, adjtimex=159, sethostname=170,
        setdomainname=171, iopl=172, ioperm=173, syslog=103, pidfd_getfd=438, kcmp=312, vhangup=153),
    "aarch64": dict(
        ptrace=117, process_vm_readv=270, process_vm_writev=271, mount=40, umount2=39, pivot_root=41,
        chroot=51, unshare=97, setns=268, init_module=105, finit_module=273, delete_module=106,
        kexec_load=104, kexec_file_load=294, bpf=280, keyctl=219, add_key=217, request_key=218, reboot=142,
        swapon=224, swapoff=225, perf_event_open=241, userfaultfd=282, open_by_handle_at=265, open_tree=428,
        move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, quotactl=60,
        acct=89, settimeofday=170, clock_settime=112, clock_adjtime=266, adjtimex=171, sethostname=161,
        setdomainname=162, syslog=116, pidfd_getfd=438, kcmp=272, vhangup=58),
}
_SOCKET = {"x86_64": (41, 53), "aarch64": (198, 199)}  # socket, socketpair
_CLONE = {"x86_64": (56, 435), "aarch64": (220, 435)}  # clone, clone3

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_ERRNO = 0x00050000
_NR_OFFSET, _ARCH_OFFSET, _ARG0_OFFSET = 0, 4, 16  # struct seccomp_data (little-endian low word of args[0])


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def assemble(program: list[tuple]) -> list[tuple[int, int, int, int]]:
    """(code, k, true-label, false-label) with labels resolved to relative jumps; ("label", name) marks a spot."""
    labels, flat = {}, []
    for item in program:
        if item[0] == "label":
            labels[item[1]] = len(flat)
        else:
            flat.append(item)
    out = []
    for i, (code, k, *targets) in enumerate(flat):
        jt, jf = (labels[t] - i - 1 if isinstance(t, str) else 0 for t in (targets + [None, None])[:2])
        out.append((code, jt, jf, k))
    return out


def build(arch: str = L.ARCH) -> list[tuple[int, int, int, int]]:
    if arch not in _DENIED:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {arch}")
    socket_nr, socketpair_nr = _SOCKET[arch]
    clone_nr, clone3_nr = _CLONE[arch]
    prog: list[tuple] = [
        (_LD_W_ABS, _ARCH_OFFSET), (_JEQ, _AUDIT_ARCH[arch], "native", "kill"),
        ("label", "native"), (_LD_W_ABS, _NR_OFFSET),
    ]
    if arch == "x86_64":
        prog.append((_JGE, 0x40000000, "deny", "next_x32"))  # the x32 ABI: a second syscall table
        prog.append(("label", "next_x32"))
    for nr, target in ((socket_nr, "sockets"), (socketpair_nr, "sockets"), (clone_nr, "clone"),
                       (clone3_nr, "enosys")):
        prog += [(_JEQ, nr, target, f"n{nr}"), ("label", f"n{nr}")]
    for name, nr in sorted(_DENIED[arch].items()):
        prog += [(_JEQ, nr, "deny", f"d{name}"), ("label", f"d{name}")]
    prog += [
        (_RET, _ALLOW),
        ("label", "sockets"), (_LD_W_ABS, _ARG0_OFFSET), (_JEQ, AF_UNIX, "allow", "deny"),
        ("label", "clone"), (_LD_W_ABS, _ARG0_OFFSET), (_JSET, L.NAMESPACE_FLAGS, "deny", "allow"),
        ("label", "allow"), (_RET, _ALLOW),
        ("label", "deny"), (_RET, _ERRNO | errno.EPERM),
        ("label", "enosys"), (_RET, _ERRNO | errno.ENOSYS),
        ("label", "kill"), (_RET, _KILL_PROCESS),
    ]
    return assemble(prog)


def install() -> None:
    """Install the filter on every thread of this process. Needs no_new_privs (or CAP_SYS_ADMIN)."""
    insns = build()
    array = (_Insn * len(insns))(*[_Insn(*i) for i in insns])
    prog = _Prog(len(insns), array)
    SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
    L.syscall("seccomp", ctypes.c_uint(SECCOMP_SET_MODE_FILTER), ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC),
              ctypes.byref(prog))
