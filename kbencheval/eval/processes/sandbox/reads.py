"""What a sandboxed process may read: an allow-list, applied as Landlock read rights (landlock.py).

A candidate's process sees the Python environment it runs on (interpreter, standard library,
installed packages), the system's toolchain and libraries (/usr, /lib*, /bin, /sbin, the few /etc
files the loader and libc read), device files, /proc and /sys, its own job folder and the shared
compile caches it only reads. Of this project's own package it sees the module files of the
folders the fork server imported from (kbencheval/eval/... and kbencheval/*.py), never the bundled
solutions, the evaluator's tests or the rest of the checkout. Home folders, run folders, other
jobs' folders and everything else stay unreadable, whatever route (a symlink, /proc/self/root,
a hard link) leads there: Landlock checks the file reached, not the path that named it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/dev", "/proc", "/sys")
# What the dynamic loader, libc and Python read at run time (user names for getpass, the time zone).
# Not all of /etc: it holds host keys and password hashes, readable to a root-owned harness.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "localtime", "timezone", "passwd", "group",
       "nsswitch.conf", "os-release", "lsb-release", "debian_version", "host.conf", "gai.conf", "OpenCL")
ENV_DIRS = ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME")
HOMES = ("/root", "/home")

RULE = ("landlock allow-list: python environment (prefix, base prefix, site-packages), /usr /lib* /bin /sbin, "
        "/etc loader and libc files, /dev /proc /sys, CUDA/ROCm homes and LD_LIBRARY_PATH, the kbencheval "
        "modules imported (not problems/solutions, tests or the checkout), the job folder and the shared "
        "compile caches; the judge also reads the scratch folder")


def package_dir() -> Path:
    import kbencheval

    return Path(kbencheval.__file__).resolve().parent


def allowed(own: list[str]) -> list[str]:
    """Every path (folder or file) to grant read rights beneath, `own` (job folder, caches) included."""
    pkg = package_dir()
    checkout = pkg.parent if any((pkg.parent / m).exists() for m in ("pyproject.toml", ".git", "setup.py")) else None
    holes = [pkg, *([checkout] if checkout else []), *map(Path, HOMES)]
    trees = [*SYSTEM, *(f"/etc/{name}" for name in ETC), sys.prefix, sys.base_prefix, sys.exec_prefix,
             sys.base_exec_prefix]
    trees += [p for p in sys.path if "-packages" in Path(p).name]  # site-packages, dist-packages
    trees += [os.environ[k] for k in ENV_DIRS if os.environ.get(k)]
    trees += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    out: list[str] = []
    for tree in trees:
        path = Path(tree).resolve()
        if path.exists():
            out += [str(p) for p in _beneath_except(path, holes)]
    # This project's own modules, file by file: the folders the fork server imported from, no deeper.
    folders = {Path(m.__file__).resolve().parent for name, m in list(sys.modules.items())
               if name.split(".")[0] == "kbencheval" and getattr(m, "__file__", None)}
    out += sorted(str(f) for d in folders if d == pkg or pkg in d.parents for f in d.glob("*.py"))
    return list(dict.fromkeys(out + [p for p in own if p and os.path.exists(p)]))


def _beneath_except(tree: Path, holes: list[Path]):
    """`tree`, or where a hole lies beneath it, its children around the hole (recursively); a tree inside
    a hole stays whole (the interpreter may live under /root)."""
    inside = [h for h in holes if h == tree or tree in h.parents]
    if not inside:
        yield tree
        return
    if any(h == tree for h in inside) or not tree.is_dir():
        return
    for child in tree.iterdir():
        yield from _beneath_except(child, inside)
