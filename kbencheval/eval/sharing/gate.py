"""One device, several Evaluators: correctness work shares the device, timing has it alone.

    gate = DeviceGate("cuda:0")
    with gate.shared():       # reference outputs, correctness trials: any number at once
        ...
    with gate.exclusive():    # timing: nothing else of ours runs on the device meanwhile
        ...

So a GPU can compile and check several candidates at once (a holder steps aside while its candidate
compiles: `Hold.stepped_aside`) while timings stay as undisturbed as with one Evaluator. The gate is
a pair of `flock`s on files named after the physical device, so it holds across threads and
processes (several Ray eval actors on one GPU, two `kbench eval` runs). Timing waits for the work
already inside, and new shared work waits behind a waiting timer (a turnstile), so timing is never
starved by a stream of correctness trials.
Only trusted harness code takes the gate; candidates never see its files.

`reserve(nbytes, capacity)` admits candidates by device memory: each holds its estimated peak
(worker and judge together) for its whole evaluation, and a candidate starts only while all
reservations on the device fit the capacity. Before it, one lock admitted one large candidate at a
time (two at once, each with its judge, had run the GPU out of memory): the large half of the
bundled suite then ran one after another, and that sum was the pass time. The reservations live in a
small JSON ledger beside the locks, changed only under an exclusive `flock`; a holder whose process
is gone is dropped, so a crash never keeps memory reserved.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import stat
import threading
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
                      "ledger_lock": root / f"{key}.ledger.lock"}
        self.ledger = root / f"{key}.ledger.json"
        for path in self.paths.values():
            path.touch(mode=0o600, exist_ok=True)

    def _open(self, name: str) -> int:
        # One open file description per holder: flock locks belong to it, so threads of one process
        # contend like separate processes do.
        return os.open(self.paths[name], os.O_RDWR)

    @contextlib.contextmanager
    def _hold(self, mode: int, waited: dict | None):
        hold = Hold(self, mode, waited)
        hold.acquire()
        try:
            yield hold
        finally:
            hold.release()

    def shared(self, waited: dict | None = None):
        """Correctness work: shares the device with other shared holders. `waited` gets wait_s, start, end."""
        return self._hold(fcntl.LOCK_SH, waited)

    def exclusive(self, waited: dict | None = None):
        """Timing: waits until the device is ours alone."""
        return self._hold(fcntl.LOCK_EX, waited)

    @contextlib.contextmanager
    def reserve(self, nbytes: int, capacity: int, waited: dict | None = None, owner: str = "",
                early_bytes: int = 0, on_queued=None, ready=None):
        """Held for a candidate's whole evaluation: `nbytes` of device memory, admitted once every
        reservation on the device, and what idle judges keep (`standing`), fits `capacity` (a lone
        request is admitted whatever its size). Requests are served in order, except that a later one
        that fits now may start before the first in line while that one has waited less than BYPASS_S:
        small candidates keep the device busy while a large one waits for room, and after BYPASS_S the
        large one is next (no starvation).

        `owner` names the Evaluator: what its judge keeps counts as standing memory between its
        candidates, and inside its own reservation, which covers the judge, not at all. Yields a
        `Reservation`: set its `standing_after` to what the judge keeps once the candidate is done.

        `on_queued` runs once the request is registered: the harness gives the candidate's worker its job
        there. What that worker holds meanwhile, `early_bytes` (a CUDA context), counts
        against every other request until this one is admitted. With `ready` (polled), the request joins
        the line only once `ready()` is true: the worker has loaded and compiled its candidate, seconds of
        CPU work that would otherwise hold the memory. Until then it neither waits first in line nor keeps
        later requests from passing it."""
        t0 = time.monotonic()
        ticket = f"{os.getpid()}-{threading.get_ident()}-{next(_TICKETS)}"
        owner = owner or ticket
        self.update_ledger(lambda ledger: ledger["queue"].append([ticket, os.getpid(), int(nbytes), time.time(),
                                                            int(early_bytes), ready is None]))
        reservation = Reservation()
        blocked: dict = {}  # what kept it out at its last look, for `waited["blocked_by_gb"]`
        try:
            if on_queued is not None:
                on_queued()
            in_line = ready is None
            while True:
                if not in_line and ready():
                    in_line = True
                    self.update_ledger(lambda ledger: _join_line(ledger, ticket))
                    if waited is not None:
                        waited["ready_after_s"] = round(time.monotonic() - t0, 4)
                if in_line and self.update_ledger(lambda ledger: _admit(ledger, ticket, capacity, owner, blocked)):
                    break
                time.sleep(RESERVE_POLL_S)
            if waited is not None and blocked:
                waited["blocked_by_gb"] = blocked
            with _recorded(waited, t0):
                yield reservation
        finally:
            self.update_ledger(lambda ledger: _drop(ledger, ticket, owner, reservation.standing_after))

    def stand(self, owner: str, nbytes: int) -> None:
        """What the Evaluator `owner` holds on the device between its candidates (its judge's timer and
        outputs, its next worker's context) is `nbytes` from now on, until its next reservation."""
        self.update_ledger(lambda ledger: ledger["standing"].__setitem__(owner, [os.getpid(), int(nbytes)]))

    def forget(self, owner: str) -> None:
        """The Evaluator `owner` is closed: its judge keeps nothing any more."""
        self.update_ledger(lambda ledger: ledger["standing"].pop(owner, None))

    def reserved(self) -> dict:
        """{"held": {ticket: [pid, bytes]}, "queue": [[ticket, pid, bytes, in line since, early_bytes, in line], ...],
        "standing": {owner: [pid, bytes]}}, live ones only."""
        return self.update_ledger(lambda ledger: {"held": dict(ledger["held"]), "queue": list(ledger["queue"]),
                                            "standing": dict(ledger["standing"])})

    def counted_gb(self) -> dict:
        """What the ledger counts on the device now, in GB: reservations held, what idle judges keep
        (standing), queued workers' contexts (early); and how many are held and queued."""
        ledger = self.reserved()
        held, standing, early = _counted(ledger)
        return {"held_gb": _gb(held), "standing_gb": _gb(standing), "early_gb": _gb(early),
                "holders": len(ledger["held"]), "queued": len(ledger["queue"])}

    def update_ledger(self, change):
        """Applies `change` to the ledger under its lock (dead holders dropped first); returns its result. Public
        so that a test can leave the ledger as a crashed holder would."""
        fd = self._open("ledger_lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            ledger = self._read()
            before = json.dumps(ledger)
            alive = {pid for pid in {e[0] for e in ledger["held"].values()} | {e[1] for e in ledger["queue"]}
                     if _alive(pid)}
            alive |= {e[0] for e in ledger["standing"].values() if _alive(e[0])}
            ledger["held"] = {t: e for t, e in ledger["held"].items() if e[0] in alive}
            ledger["queue"] = [e for e in ledger["queue"] if e[1] in alive]
            ledger["standing"] = {o: e for o, e in ledger["standing"].items() if e[0] in alive}
            result = change(ledger)
            if (after := json.dumps(ledger)) != before:  # waiters poll: most looks change nothing
                tmp = self.ledger.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(after)
                os.replace(tmp, self.ledger)
            return result
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read(self) -> dict:
        try:
            ledger = json.loads(self.ledger.read_text())
            if isinstance(ledger.get("held"), dict) and isinstance(ledger.get("queue"), list):
                return {"standing": {}, **ledger}
        except (OSError, ValueError, AttributeError):
            pass  # none yet, or torn by a crash: the live holders re-register nothing, so start empty
        return {"held": {}, "queue": [], "standing": {}}


RESERVE_POLL_S = 0.02
BYPASS_S = 15.0  # how long the first in line lets later, smaller requests go first (about two candidates)
_TICKETS = itertools.count()


class Reservation:
    standing_after = 0
    """Bytes the owner's judge keeps once the reservation ends (its cached outputs and timer)."""


def _in_line(entry: list) -> bool:
    return len(entry) < 6 or entry[5]  # entries of an older ledger have no readiness: in line


def _join_line(ledger: dict, ticket: str) -> None:
    """`ticket`'s worker is ready: it takes its place in line now (see DeviceGate.reserve)."""
    for entry in ledger["queue"]:
        if entry[0] == ticket:
            entry[3], entry[5] = time.time(), True


def _counted(ledger: dict, owner: str = "", ticket: str = "") -> tuple[int, int, int]:
    """Bytes the ledger counts: reservations held, what idle judges keep (standing; not `owner`'s, which
    its own reservation covers) and queued workers' contexts (early; not `ticket`'s)."""
    held = sum(nbytes for _, nbytes in ledger["held"].values())
    standing = sum(nbytes for o, (_, nbytes) in ledger["standing"].items() if o != owner)
    early = sum(entry[4] for entry in ledger["queue"] if entry[0] != ticket and len(entry) > 4)  # started early
    return held, standing, early


def _gb(nbytes: int) -> float:
    return round(nbytes / 2**30, 2)


def _admit(ledger: dict, ticket: str, capacity: int, owner: str, blocked: dict | None = None) -> bool:
    """Moves `ticket` from the queue to the holders if it may start now (see DeviceGate.reserve). If it
    may not, `blocked` gets what was in its way: the held, standing and early bytes in GB, and its place."""
    held, standing, early = _counted(ledger, owner, ticket)
    used = held + standing + early
    if not any(entry[0] == ticket for entry in ledger["queue"]):
        raise RuntimeError(f"device memory reservation {ticket} vanished from the ledger")
    line = sorted((entry for entry in ledger["queue"] if _in_line(entry)), key=lambda entry: entry[3])
    for position, (t, pid, nbytes, *_) in enumerate(line):
        if t != ticket:
            continue
        first_waited = time.time() - line[0][3]
        fits = used + nbytes <= capacity or not ledger["held"]
        if fits and (position == 0 or (first_waited < BYPASS_S and ledger["held"])):
            ledger["queue"].remove(line[position])
            ledger["held"][ticket] = [pid, nbytes]
            ledger["standing"].pop(owner, None)  # inside the reservation now
            return True
        if blocked is not None:
            blocked.update(held=_gb(held), standing=_gb(standing), early=_gb(early), position=position,
                           holders=len(ledger["held"]), fits=fits)
        return False
    return False  # not in line yet


def _drop(ledger: dict, ticket: str, owner: str = "", standing: int = 0) -> None:
    """Ends `ticket`; with an `owner`, what its judge keeps from now on counts as standing memory."""
    entry = ledger["held"].pop(ticket, None)
    ledger["queue"] = [e for e in ledger["queue"] if e[0] != ticket]
    if owner and standing > 0 and entry:
        ledger["standing"][owner] = [entry[0], int(standing)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Hold:
    """One holder's place on the device: taken through the turnstile, and it can step aside
    (`stepped_aside`) while its holder does CPU-only work, such as a candidate's Triton compile, so that a
    waiting timer does not wait for that work. `waited` gets wait_s, held_s, the first hold's start, the
    last one's end and every hold (a phase may take the gate once per trial, and again after a compile)."""

    def __init__(self, gate: DeviceGate, mode: int, waited: dict | None):
        self.gate, self.mode, self.waited = gate, mode, waited
        self.fds: tuple[int, int] | None = None
        self.since = 0.0

    def acquire(self) -> None:
        t0 = time.monotonic()
        turnstile, device = self.gate._open("turnstile"), self.gate._open("device")
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # queue behind a timer that is already waiting
            try:
                fcntl.flock(device, self.mode)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        except BaseException:
            os.close(device)
            os.close(turnstile)
            raise
        self.fds, self.since = (turnstile, device), time.monotonic()
        _note_wait(self.waited, t0, self.since)

    def release(self) -> None:
        if self.fds is None:
            return
        turnstile, device = self.fds
        self.fds = None
        _note_hold(self.waited, self.since, time.monotonic())  # before the next holder can start
        fcntl.flock(device, fcntl.LOCK_UN)
        os.close(device)
        os.close(turnstile)

    @contextlib.contextmanager
    def stepped_aside(self):
        """Lets go of the device for the block and takes it again, through the turnstile, after it. If
        the block raises, the device stays released: the holder is finishing, not coming back."""
        self.release()
        yield
        self.acquire()


@contextlib.contextmanager
def _recorded(waited: dict | None, t0: float):
    """Around a reservation just admitted (asked for at t0): its wait and its hold, as `Hold` records them."""
    now = time.monotonic()
    _note_wait(waited, t0, now)
    try:
        yield
    finally:
        _note_hold(waited, now, time.monotonic())


def _note_wait(waited: dict | None, asked: float, taken: float) -> None:
    """Adds to wait_s and keeps the first hold's start."""
    if waited is not None:
        waited["wait_s"] = round(waited.get("wait_s", 0.0) + taken - asked, 4)
        waited.setdefault("start", taken)


def _note_hold(waited: dict | None, start: float, end: float) -> None:
    """Adds to held_s, keeps the last hold's end and lists every hold."""
    if waited is not None:
        waited["end"] = end
        waited["held_s"] = round(waited.get("held_s", 0.0) + end - start, 4)
        waited.setdefault("holds", []).append([start, end])
