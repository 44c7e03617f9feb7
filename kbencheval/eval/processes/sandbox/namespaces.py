"""Namespaces and mounts: the fork server's own (user, mount, IPC, network, UTS), and each worker's.

    fork server   user ns (uid mapped to itself), mount/IPC/net/UTS ns; / read-only except scratch,
                  private /dev/shm and /tmp; stays in the harness's PID namespace (its pids are the harness's)
     ├─ judge     PID 1 of a fresh PID namespace: candidates cannot signal it (init ignores them)
     └─ worker    forked into the judge's PID namespace; own mount ns with a private /proc and /tmp,
                  scratch read-only except its own job folder

Every step is tried and recorded; a step that fails is listed with its reason and skipped.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from kbencheval.eval.processes.sandbox import _linux as L

SHM_SIZE = "size=1g"


class ServerSandbox:
    def __init__(self, plan: dict):
        self.plan = plan
        self.active: list[str] = []
        self.missing: dict[str, str] = {}
        self.child_pidns: str | None = None
        self.helper_pid: int | None = None  # the judge's PID namespace, as /proc/<pid>/ns/pid reads

    def _try(self, name: str, fn) -> bool:
        try:
            fn()
        except OSError as e:
            self.missing[name] = e.strerror or str(e)
            return False
        self.active.append(name)
        return True

    def enter(self) -> None:
        """Called first thing in the fork server, while it is single-threaded (unshare(CLONE_NEWUSER) needs that)."""
        if self.plan.get("mode", "none") == "none":
            return
        uid, gid = os.getuid(), os.getgid()
        if not os.access("/proc/self/uid_map", os.W_OK):  # e.g. a read-only /proc under bubblewrap
            # A user namespace whose uid cannot be mapped leaves this process as `nobody`: never enter one.
            self.missing["user-ns"] = "/proc/self/uid_map is not writable here"
        else:
            self._try("user-ns", lambda: self._user_ns(uid, gid))
        for flag, name in ((L.CLONE_NEWNS, "mount-ns"), (L.CLONE_NEWIPC, "ipc-ns"), (L.CLONE_NEWNET, "net-ns"),
                           (L.CLONE_NEWUTS, "uts-ns")):
            self._try(name, lambda flag=flag: L.unshare(flag))
        if "mount-ns" in self.active:
            self._mounts()

    @staticmethod
    def _user_ns(uid: int, gid: int) -> None:
        L.unshare(L.CLONE_NEWUSER)
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")

    def _mounts(self) -> None:
        scratch = self.plan["scratch"]
        L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)  # nothing we mount reaches the host
        for path in self.plan.get("hide", []):
            if os.path.isfile(path):
                self._try("hidden-files", lambda path=path: L.mount("/dev/null", os.path.realpath(path), None, L.MS_BIND))

        def read_only_root():
            L.mount(scratch, scratch, None, L.MS_BIND | L.MS_REC)  # our own mount: its flags stay ours to clear
            L.mount_setattr("/", set_=L.MOUNT_ATTR_RDONLY, recursive=True)
            try:
                L.mount_setattr(scratch, clear=L.MOUNT_ATTR_RDONLY, recursive=True)
            except OSError as e:  # scratch read-only would leave the server unable to work: stop here
                raise SystemExit(f"kbench fork server: scratch stayed read-only after the read-only root: {e}")
            try:  # CUDA writes under /proc while it initialises, where no private /proc can be had
                L.mount_setattr("/proc", clear=L.MOUNT_ATTR_RDONLY)
            except OSError:
                pass

        if self.plan.get("under_bwrap"):  # bubblewrap already made / read-only and /tmp private
            self._try("private-shm", lambda: L.mount("tmpfs", "/dev/shm", "tmpfs", L.MS_NOSUID | L.MS_NODEV,
                                                     f"mode=1777,{SHM_SIZE}"))
            return
        self._try("ro-root", read_only_root)
        self._try("private-shm", lambda: L.mount("tmpfs", "/dev/shm", "tmpfs", L.MS_NOSUID | L.MS_NODEV,
                                                 f"mode=1777,{SHM_SIZE}"))
        self._try("private-tmp", lambda: L.tmpfs_over("/tmp", keep_paths(scratch)))

    # -- PID namespaces ------------------------------------------------------------------------------
    def start_helper(self, handlers: dict) -> None:
        """Fork the helper that makes PID namespaces. It keeps this process's own PID namespace for
        its children, which this process gives up once it forks into the judge's namespace (and a
        user namespace may not setns back to the harness's namespace to make another)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(req_w)
            os.close(rep_r)
            L.prctl(L.PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # intermediates are reaped by the kernel
            with os.fdopen(req_r) as requests, os.fdopen(rep_w, "w", buffering=1) as replies:
                for line in requests:
                    request = json.loads(line)
                    try:
                        middle, init = _spawn_init(lambda: handlers[request["what"]](request["payload"]))
                        done = _wait_child(middle, request["wait_s"]) if request.get("wait_s") else ""
                        replies.write(json.dumps({"error": done} if done else {"middle": middle, "init": init}) + "\n")
                    except OSError as e:
                        replies.write(json.dumps({"error": e.strerror or str(e)}) + "\n")
            os._exit(0)
        self.helper_pid = pid
        os.close(req_r)
        os.close(rep_w)
        self._requests, self._replies = os.fdopen(req_w, "w", buffering=1), os.fdopen(rep_r)

    def spawn_init(self, what: str, payload) -> tuple[int, int]:
        """Start handlers[what](payload) as PID 1 of a fresh PID namespace, and fork into it from now on.
        Returns (intermediate pid, init pid); killing the intermediate kills the init and its namespace."""
        self._requests.write(json.dumps({"what": what, "payload": payload}) + "\n")
        reply = json.loads(self._replies.readline() or '{"error": "the namespace helper died"}')
        if "error" in reply:
            raise OSError(1, f"could not start a process in a new PID namespace: {reply['error']}")
        middle = reply["middle"]
        # Through the intermediate: the init may already have made itself non-dumpable.
        fd = os.open(f"/proc/{middle}/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.child_pidns = os.readlink(f"/proc/{middle}/ns/pid_for_children")
            L.setns(fd, L.CLONE_NEWPID)
        finally:
            os.close(fd)
        return middle, reply["init"]

    def run_to_end(self, what: str, payload, timeout_s: float) -> None:
        """Run handlers[what](payload) as PID 1 of a fresh PID namespace until it ends, without joining that
        namespace (the sandbox probe). The helper, the intermediate's parent, waits: from here the
        intermediate of a quick run could be gone, its /proc entry with it, before spawn_init read it."""
        self._requests.write(json.dumps({"what": what, "payload": payload, "wait_s": timeout_s}) + "\n")
        reply = json.loads(self._replies.readline() or '{"error": "the namespace helper died"}')
        if "error" in reply:
            raise OSError(1, reply["error"])

    def members(self) -> list[int]:
        """Live processes of the judge's PID namespace (pids as this process sees them)."""
        if not self.child_pidns:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == self.child_pidns:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    def wipe_shared_places(self) -> None:
        """Between candidates: the Evaluator-private /dev/shm emptied, SysV IPC objects removed."""
        if "private-shm" in self.active:
            for name in os.listdir("/dev/shm"):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except IsADirectoryError:
                    import shutil

                    shutil.rmtree(os.path.join("/dev/shm", name), ignore_errors=True)
                except OSError:
                    pass
        if "ipc-ns" in self.active:
            for kind, rm in (("shm", L.libc.shmctl), ("sem", L.libc.semctl), ("msg", L.libc.msgctl)):
                try:
                    with open(f"/proc/sysvipc/{kind}") as f:
                        ids = [int(line.split()[1]) for line in f.readlines()[1:] if line.strip()]
                except OSError:
                    continue
                for ident in ids:
                    rm(ident, 0, 0) if kind != "sem" else rm(ident, 0, 0, 0)  # IPC_RMID


def enter_worker(plan: dict, layers: list[str], job_dir: str, kind: str) -> list[str]:
    """In a freshly forked worker: its own mounts (those in `layers` must work). Returns the layers applied."""
    done = []
    if "mount-ns" in layers:
        L.unshare(L.CLONE_NEWNS)
        done.append("mount-ns")
        if "private-proc" in layers:
            L.mount("proc", "/proc", "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
            done.append("private-proc")
        if "private-tmp" in layers:
            L.tmpfs_over("/tmp", keep_paths(plan["scratch"]))
            done.append("private-tmp")
        if kind != "judge" and "ro-root" in layers:
            scratch = plan["scratch"]
            L.mount_setattr(scratch, set_=L.MOUNT_ATTR_RDONLY, recursive=True)
            L.mount(job_dir, job_dir, None, L.MS_BIND)
            L.mount_setattr(job_dir, clear=L.MOUNT_ATTR_RDONLY)
            done.append("ro-scratch-outside-job")
            if "private-tmp" in layers:  # other jobs' folders out of sight (Landlock's /tmp rule covers scratch)
                L.tmpfs_over(scratch, [job_dir, plan.get("shared_cache") or ""], options="mode=0555")
                L.mount_setattr(scratch, set_=L.MOUNT_ATTR_RDONLY)
                done.append("scratch-only-own-job")
    if kind == "judge":
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)  # as PID 1, signals without a handler never arrive
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # orphans re-parented to the judge are reaped at once
        L.prctl(L.PR_SET_DUMPABLE, 0)
    return done



def keep_paths(scratch: str) -> list[str]:
    """What a private /tmp must not hide: scratch, this interpreter, its packages, this checkout (CI clones into /tmp)."""
    return [scratch, sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parents[4]), *sys.path]


def _mirror_exit(pid: int) -> None:
    """Wait for `pid` and end this process the same way, so the exit status reads as its own."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _wait_child(pid: int, timeout_s: float) -> str:
    """In the helper (SIGCHLD ignored, so an exited child is reaped at once and waitpid then says it has
    none): '' once child `pid` has ended, else why not, after killing it."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return ""
        except ChildProcessError:
            return ""
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)  # its PID 1 dies with it (PDEATHSIG)
    return f"the run did not finish within {timeout_s:g} s"


def _spawn_init(run) -> tuple[int, int]:
    """Fork an intermediate that makes a PID namespace, forks run() as its PID 1, then mirrors its exit."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:  # the intermediate never returns into its caller's code, whatever fails
            os.close(r)
            # The helper ignores SIGCHLD; inherited, that would reap an init that ends at once before
            # _mirror_exit waits for it.
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setsid()
            L.prctl(L.PR_SET_PDEATHSIG, signal.SIGKILL)
            L.unshare(L.CLONE_NEWPID)
            init = os.fork()
            if init == 0:
                os.close(w)
                signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # as it was before: its orphans are reaped at once
                L.prctl(L.PR_SET_PDEATHSIG, signal.SIGKILL)
                _run_then_exit(run)
            os.write(w, str(init).encode())
            os.close(w)
            _mirror_exit(init)
        except BaseException as e:  # noqa: BLE001 - reported on the pipe while it is open, then exit
            try:
                os.write(w, f"error {getattr(e, 'strerror', None) or e}".encode())
            except OSError:
                pass
        finally:
            os._exit(70)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    if not text.isdigit():
        raise OSError(1, text or "the intermediate died")
    return middle, int(text)


def _run_then_exit(run) -> None:
    """PID 1's whole life: run(), then exit; an error ends it too (status 1), never returning into the
    code it was forked from."""
    try:
        run()
    except BaseException:  # noqa: BLE001 - its traceback goes to the log, then it ends
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)
