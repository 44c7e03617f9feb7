"""`SGLangRouter`: sglang-router (the `sglang-router` package, a Rust binary) in front of SGLang servers.

    router = SGLangRouter(["http://127.0.0.1:30001", "http://127.0.0.1:30002"])   # starts one on a free port
    requests.post(f"{router.url}/generate", json=...)                          # spread over the servers
    router.remove("http://127.0.0.1:30002"); router.close()                     # the process is gone after close

Or join a running router: `SGLangRouter(urls, url="http://HOST:PORT")` registers the servers it does not
list yet (POST /workers) and never stops it. Worker management uses the router's control-plane API of
sglang-router 0.3 (GET/POST /workers, DELETE /workers/{id}); only generation goes through the router,
weight loads go to each server directly. A router started here dies with the process that started it
(Linux parent-death signal), so a crashed run leaves no router behind.
"""

from __future__ import annotations

import importlib.util
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from kbencheval.config import ConfigError

FIX = ("pip install -e '.[sglang]' (or pip install sglang-router), or point rollout.router_url at a running router, "
       "or set rollout.router='' to talk to rollout.sglang_urls directly")


class RouterError(ConfigError):
    """The router cannot be started or reached; one line naming the fix."""


def check_router(url: str = "", timeout_s: float = 5.0) -> None:
    """Raise RouterError unless a router can be used: `url` answers GET /workers, or (url="") sglang_router imports."""
    if not url:
        if importlib.util.find_spec("sglang_router") is None:
            raise RouterError(f"rollout.router=sglang needs the sglang_router package, which is not installed: {FIX}")
        return
    try:
        resp = requests.get(f"{url.rstrip('/')}/workers", timeout=timeout_s)
        reason = "" if resp.ok else f"HTTP {resp.status_code}"
    except requests.RequestException as exc:
        reason = exc.__class__.__name__
    if reason:
        raise RouterError(f"cannot reach the sglang-router at {url}/workers ({reason}); start it with `python -m "
                          f"sglang_router.launch_router --port PORT` or fix rollout.router_url")


def _die_with_parent() -> None:  # runs in the child before exec: SIGTERM when the starting process dies
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


class SGLangRouter:
    def __init__(self, worker_urls: list[str], url: str = "", policy: str = "round_robin",
                 startup_s: float = 60.0, request_timeout_s: float = 600.0):
        self.proc: subprocess.Popen | None = None
        self.log_path = ""
        self.timeout_s = 10.0  # control-plane calls
        if url:
            check_router(url)
            self.url = url.rstrip("/")
            for worker in worker_urls:
                if worker.rstrip("/") not in self.workers():
                    self.add(worker)
        else:
            check_router()
            self._spawn([w.rstrip("/") for w in worker_urls], policy, startup_s, request_timeout_s)

    def _spawn(self, workers: list[str], policy: str, startup_s: float, request_timeout_s: float) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        log = tempfile.NamedTemporaryFile("w", prefix="sglang-router-", suffix=".log", delete=False)
        self.log_path = log.name
        cmd = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
               "--policy", policy, "--log-level", "warn", "--request-timeout-secs", str(max(1, int(request_timeout_s))),
               "--worker-startup-timeout-secs", str(max(1, int(startup_s))), "--worker-urls", *workers]
        with log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
        deadline = time.monotonic() + startup_s
        while True:
            listed = self._listed_or_none()
            if listed is not None and all(w in listed for w in workers):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {self.proc.returncode}" if self.proc.poll() is not None else f"not up after {startup_s:.0f}s"
                tail = self.log_tail()
                self.close()
                raise RouterError(f"sglang-router {why} (workers {workers}; last log line: {tail!r}); check that every "
                                  f"rollout.sglang_urls server answers /health, or {FIX}")
            time.sleep(0.2)

    def _listed_or_none(self) -> dict | None:
        try:
            return self.workers()
        except (requests.RequestException, ValueError):
            return None

    def log_tail(self) -> str:
        try:
            lines = Path(self.log_path).read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][-300:] if lines else ""

    # ---- the router's worker registry (control-plane API) ----
    def _registry(self) -> list[dict]:
        resp = requests.get(f"{self.url}/workers", timeout=self.timeout_s)
        resp.raise_for_status()
        return resp.json().get("workers", [])

    def workers(self) -> dict[str, bool]:
        """{worker url: the router's own health flag} for every registered worker."""
        return {w["url"].rstrip("/"): bool(w.get("is_healthy", True)) for w in self._registry()}

    def add(self, worker_url: str, wait_s: float = 30.0) -> None:
        """Register a worker and wait until the router lists it (the router adds workers in the background)."""
        worker = worker_url.rstrip("/")
        resp = requests.post(f"{self.url}/workers", json={"url": worker}, timeout=self.timeout_s)
        if not resp.ok:
            raise RouterError(f"sglang-router at {self.url} refused worker {worker} (HTTP {resp.status_code}: "
                              f"{resp.text[:200]})")
        self._wait(lambda: worker in self.workers(), wait_s, f"did not register worker {worker}")

    def remove(self, worker_url: str, wait_s: float = 30.0) -> bool:
        """Deregister a worker; False if the router did not list it."""
        worker = worker_url.rstrip("/")
        ids = [w["id"] for w in self._registry() if w["url"].rstrip("/") == worker]
        for worker_id in ids:
            requests.delete(f"{self.url}/workers/{worker_id}", timeout=self.timeout_s)
        if ids:
            self._wait(lambda: worker not in self.workers(), wait_s, f"did not remove worker {worker}")
        return bool(ids)

    def _wait(self, done, wait_s: float, what: str) -> None:
        deadline = time.monotonic() + wait_s
        while not done():
            if time.monotonic() > deadline:
                raise RouterError(f"sglang-router at {self.url} {what} within {wait_s:.0f}s; see its log {self.log_path}")
            time.sleep(0.1)

    # ---- lifetime ----
    def endpoint(self) -> str:
        """The router's base URL (for Ray actor handles, which cannot read attributes)."""
        return self.url

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def close(self) -> None:
        """Stop a router started here (a joined one is left running); idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.log_path:
            Path(self.log_path).unlink(missing_ok=True)
            self.log_path = ""

    def __enter__(self) -> "SGLangRouter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the parent-death signal still stops the router
            pass
