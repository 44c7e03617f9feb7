"""The Evaluator's processes: its fork server (restarted when it dies), its judge (started on first use,
called, released, killed) and the spare worker forked for the next candidate. Trusted code, a part of
harness.Evaluator."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

from kbencheval.eval.contract.errors import tail
from kbencheval.eval.contract.protocol import Compare, JudgeJob, Prepare, Release
from kbencheval.eval.contract.judge_replies import JudgeReply, Prepared, decode_reply
from kbencheval.eval.processes.launch import Conn, ForkClient, Worker, accept_from
from kbencheval.eval.processes.lifecycle import kill_group
from kbencheval.eval.processes.server import HarnessError, _Server
from kbencheval.eval.sharing.sizing import CUDA_CONTEXT_BYTES
from kbencheval.eval.trusted.timing_checks import gate_window

_WHOLE_DEVICE = 1 << 60  # a reservation that is admitted only alone (gate._admit) and keeps every other one out


class EvaluatorProcesses:
    """Evaluator's fork server, judge and spare worker (the attributes are the Evaluator's own)."""

    # -- what the attack tests and operators may look at: read-only views of the processes ----------
    @property
    def scratch(self) -> Path:
        """This Evaluator's scratch folder: every job folder, log and the sandbox's probe are under it."""
        return Path(self._scratch)

    def process_ids(self) -> dict[str, int | None]:
        """The pids of its processes, as this process sees them: the fork server, the judge (the PID 1 of
        its namespace) and the spare worker forked for the next candidate (None while there is none)."""
        spare = self._spare if self._spare is not None and not self._spare.conn.closed_by_peer() else None
        return {"fork_server": self._server.proc.pid, "judge": self._judge_init,
                "spare": spare.pid if spare is not None else None}

    def spare_forked_at(self) -> float | None:
        """When the spare worker for the next candidate was forked (its `forked` clock), None while there is none."""
        return self._spare.forked if self._spare is not None else None

    def fork_server_alive(self) -> bool:
        return self._server.proc.poll() is None

    def drain_compiles(self) -> None:
        """Waits for the kernel and launcher builds started in the background to finish."""
        for cache in (self._server.launchers, self._server.kernels):
            if cache:
                cache.drain()

    @property
    def kernel_compiler(self):
        """The shared background compiler of candidates' kernels (kernel_cache.shared_compiler), or None."""
        return self._server.kernels

    def _kill_judge(self):
        for pid in (self._judge_pid, self._judge_init):
            if pid:
                kill_group(pid)
        self._judge = self._judge_pid = self._judge_init = None
        self._judge_kept = 0
        self._judge_untrimmed = False

    def _ensure_server(self):
        """A fork server that died (and the judge with it) is started again before the next candidate."""
        if self._server.proc.poll() is None:
            self._server.wait_ready()  # an Evaluator made with wait_ready=False
            return
        t0, why = time.monotonic(), f"exit status {self._server.proc.returncode}: " + \
            tail(self._scratch / "forkserver.log", 2)
        self._server.close()
        self._kill_judge()
        if self._spare is not None:  # died with its fork server
            self._spare.kill()
            self._spare = None
        self._server = _Server(self.cfg, self._scratch, self._hide)
        self.restarts["fork_server"] += 1
        self._restarted = {"fork_server": why, "seconds": round(time.monotonic() - t0, 3)}

    @property
    def forks(self) -> ForkClient:
        """The narrow handle a worker's launch gets (processes/launch.py), not this whole Evaluator."""
        return ForkClient(scratch=self._scratch, cfg=self.cfg, spawn=self._spawn, next_job=self._next_job,
                          sweep=self._sweep)

    def _sweep(self) -> None:
        self._server.call(op="sweep", keep=[self._judge_pid] if self._judge_pid else [])

    def _next_job(self) -> int:
        self._job_counter += 1
        return self._job_counter

    def _fork_spare(self) -> None:
        """Forks the next candidate's worker now (kbencheval/eval/processes/launch.py): after the last candidate's
        worker and its leftovers were killed, before the next candidate is known. Only while the judge
        lives: workers are forked into its PID namespace. Its CUDA context counts as this Evaluator's
        standing memory until its candidate's reservation covers it."""
        if self._spare is not None or self._judge is None:
            return
        try:
            self._spare = Worker(self.forks)
        except (HarnessError, TimeoutError):
            return  # the next candidate forks its own, and reports what fails then
        if not self.cfg.on_cpu:
            self.gate.stand(self._owner, self._judge_kept + CUDA_CONTEXT_BYTES)

    def _spawn(self, job: dict, deadline: float) -> tuple[int, Conn]:
        sock_path = os.path.join(job["job_dir"], "ctl.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock_path)
        listener.listen(1)
        job["socket"] = sock_path
        reply = self._server.call(op="spawn", job=job)
        if "pid" not in reply:
            listener.close()
            raise HarnessError(reply.get("error", "the fork server could not start a worker"))
        pid = reply["pid"]
        if job["kind"] == "judge":  # PID 1 of its namespace: killing its parent does not kill it
            self._judge_init = reply.get("init", pid)
        try:
            conn = accept_from(listener, {pid, reply.get("init", pid)},
                               time.monotonic() + max(1.0, min(60.0, deadline - time.monotonic())))
        except TimeoutError:
            kill_group(pid)
            raise HarnessError(f"worker {job['kind']} never connected; see {job['job_dir']}/worker.log") from None
        finally:
            listener.close()
        return pid, Conn(conn, deadline)

    def judge_call(self, msg) -> JudgeReply:
        """One request to this Evaluator's judge process (started on first use), and its typed reply.
        Every judge request of the Evaluator and its sessions goes through here, so a test may wrap it."""
        if self._judge is None:
            job_dir = tempfile.mkdtemp(prefix="judge-", dir=self._scratch)
            self._judge_dir = job_dir
            job = JudgeJob(job_dir=job_dir, device=self.cfg.device_index,
                           cache_bytes=int(self.cfg.judge_cache_gb * 2**30)).to_dict()
            self._judge_pid, self._judge = self._spawn(job, time.monotonic() + 120)
            self.restarts["judge"] += self._judge_started
            self._judge_started = True
        self._judge.deadline = time.monotonic() + 600
        try:
            self._judge.send(msg)
            line = self._judge.recv_line()
        except OSError:  # broken pipe, or no answer within the deadline
            line = None
        if line is None:
            self._kill_judge()
            raise HarnessError(f"the judge process died: {tail(Path(self._judge_dir) / 'worker.log', 6)}")
        try:
            reply = decode_reply(msg, line)
        except ValueError as e:  # the judge is trusted: a reply that does not parse is the harness's bug
            raise HarnessError(str(e)) from None
        if reply.reserved_bytes is not None:
            self._judge_kept = reply.reserved_bytes
        self._judge_untrimmed = isinstance(msg, Compare) and not msg.trim  # the Compare.trim it skipped
        return reply

    def _prepare_alone(self, prepare: Prepare, checks: dict) -> Prepared:
        """The judge's prepare once more, after it ran out of device memory: with every other reservation
        on the device ended, none admitted meanwhile, and no other work on the device. A prepare runs
        before its candidate's reservation (whose size it tells), so it is counted nowhere: at the start of
        a pass, judges preparing at once filled the device, and the Evaluator's own retry,
        with the device to itself but the others' memory still held, failed the same way."""
        with self.gate.reserve(_WHOLE_DEVICE, _WHOLE_DEVICE, gate_window(checks, "prepare_alone"),
                               owner=self._owner) as reservation, self.gate.exclusive(gate_window(checks, "prepare")):
            spare = CUDA_CONTEXT_BYTES if self._spare is not None else 0
            reservation.standing_after = self._judge_kept + spare  # what stands again after it, even if the call fails
            prep = self.judge_call(prepare)
            reservation.standing_after = self._judge_kept + spare
        checks["prepare_oom_retry"] = "the reference ran out of device memory beside other work; prepared again alone"
        return prep

    def _release_judge(self, keep_problem: bool = False) -> None:
        try:
            self.judge_call(Release(keep_problem=keep_problem))
        except HarnessError:
            pass  # a dead judge holds nothing; the next candidate starts a new one
