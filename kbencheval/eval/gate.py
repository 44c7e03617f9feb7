"""One device, several Evaluators: correctness work shares the device, timing has it alone.

    gate = DeviceGate("cuda:0")
    with gate.shared():       # reference outputs, correctness trials: any number at once
        ...
    with gate.exclusive():    # timing: nothing else of ours runs on the device meanwhile
        ...

So a GPU can compile and check several candidates at once (compile needs no gate at all) while
timings stay as undisturbed as with one Evaluator. The gate is a pair of `flock`s on files named
after the physical device, so it holds across threads and processes (several Ray eval actors on one
GPU, two `kbench eval` runs). Timing waits for the work already inside, and new shared work waits
behind a waiting timer (a turnstile), so timing is never starved by a stream of correctness trials.
Only trusted harness code takes the gate; candidates never see its files.

A third lock, `large()`, admits one large candidate at a time (one whose trial tensors pass its
Evaluator's share of device memory): its phases still share the device with small candidates, but
two large ones at once, each with its judge, ran an H100 out of memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from pathlib import Path


def physical_device_key(device: str) -> str:
    """`cuda:N` as the machine names it: the N-th entry of CUDA_VISIBLE_DEVICES (an index or a UUID,
    e.g. under Ray), so two processes that both call their GPU `cuda:0` share a gate only if it is the
    same GPU. The harness never initialises CUDA, so this reads the environment, not the driver."""
    if device == "cpu":
        return "cpu"
    index = int(device.partition(":")[2] or 0)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", os.environ.get("HIP_VISIBLE_DEVICES", "")).split(",")
               if v.strip()]
    return "gpu-" + (visible[index] if index < len(visible) else str(index)).replace("/", "_")


def gate_dir() -> Path:
    """One folder per user and machine, whatever TMPDIR a process has (Ray workers, tests), so every
    Evaluator of this user finds the same gates; it must be the user's own and closed to others, since
    whoever can lock these files can stall our timings."""
    path = Path(f"/tmp/kbench-{os.getuid()}/gates")
    for folder in (path.parent, path):  # mkdir(parents=True) would give the parent the umask's mode
        folder.mkdir(mode=0o700, exist_ok=True)
    for folder in (path.parent, path):
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise PermissionError(f"{folder} is not a private folder of yours (owner uid {st.st_uid}, mode "
                                  f"{oct(st.st_mode & 0o777)}): remove it so the device gate can make its own")
    return path


class DeviceGate:
    def __init__(self, device: str, lock_dir: str | None = None):
        root = Path(lock_dir) if lock_dir else gate_dir()
        key = physical_device_key(device)
        self.paths = {"turnstile": root / f"{key}.turnstile", "device": root / f"{key}.lock",
                      "large": root / f"{key}.large"}
        for path in self.paths.values():
            path.touch(mode=0o600, exist_ok=True)

    def _open(self, name: str) -> int:
        # One open file description per holder: flock locks belong to it, so threads of one process
        # contend like separate processes do.
        return os.open(self.paths[name], os.O_RDWR)

    @contextlib.contextmanager
    def _hold(self, mode: int, waited: dict | None):
        t0 = time.monotonic()
        turnstile, device = self._open("turnstile"), self._open("device")
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # queue behind a timer that is already waiting
            try:
                fcntl.flock(device, mode)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            with _recorded(waited, t0):
                yield
        finally:
            fcntl.flock(device, fcntl.LOCK_UN)
            os.close(device)
            os.close(turnstile)

    def shared(self, waited: dict | None = None):
        """Correctness work: shares the device with other shared holders. `waited` gets wait_s, start, end."""
        return self._hold(fcntl.LOCK_SH, waited)

    def exclusive(self, waited: dict | None = None):
        """Timing: waits until the device is ours alone."""
        return self._hold(fcntl.LOCK_EX, waited)

    @contextlib.contextmanager
    def large(self, waited: dict | None = None):
        """Held for a large candidate's whole evaluation: at most one on the device at a time."""
        t0 = time.monotonic()
        fd = self._open("large")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with _recorded(waited, t0):
                yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


@contextlib.contextmanager
def _recorded(waited: dict | None, t0: float):
    """With a lock just taken (asked for at t0): fill `waited` with wait_s, start and, on leaving, end."""
    if waited is None:
        yield
        return
    waited["wait_s"], waited["start"] = round(time.monotonic() - t0, 4), time.monotonic()
    try:
        yield
    finally:
        waited["end"] = time.monotonic()
