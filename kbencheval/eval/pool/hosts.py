"""Where a pool's hosts live. A host (of Evaluators) holds `lanes` Evaluators on one device and judges that many
candidates at once; the pool sees it only through this handle:

    ready            a Future that resolves once its Evaluators are up (or raises why they are not)
    submit(...)      a Future of one EvalResult
    abandon()        stop it now, without waiting (it stopped answering)
    close()          stop it in order

LocalHost runs in this process: one thread per lane, each owning its Evaluator for the host's life
(a fork server dies with the thread that started it). RayHost is a Ray actor, placed by Ray; it gets
problems and code as data, so a node needs the package, not the head's files.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

from kbencheval.eval.config import EvalConfig


def start_evaluators(cfg: EvalConfig, count: int) -> list:
    from kbencheval.eval.trusted.harness import start_evaluators as start

    return start(cfg, count)


class LocalHost:
    """`lanes` Evaluators in threads of this process. `start(cfg, count)` makes them (tests pass a fake)."""

    def __init__(self, cfg: EvalConfig, lanes: int = 1, start=start_evaluators):
        self.ready: Future = Future()
        self._inbox: queue.Queue = queue.Queue()
        self._evaluators: list = []
        self._stopped = threading.Event()
        self._mutex = threading.Lock()
        self._threads = [threading.Thread(target=self._lane, args=(cfg, start, lanes), daemon=True,
                                          name=f"evaluator-{cfg.device}-{i}") for i in range(lanes)]
        for t in self._threads:
            t.start()

    def _lane(self, cfg: EvalConfig, start, lanes: int) -> None:
        try:
            [evaluator] = start(cfg, 1)
        except BaseException as e:  # noqa: BLE001 - the pool reports the start's cause
            if not self.ready.done():
                self.ready.set_exception(e)
            return
        with self._mutex:
            self._evaluators.append(evaluator)
            if len(self._evaluators) == lanes and not self.ready.done():
                self.ready.set_result(True)
        while not self._stopped.is_set():
            item = self._inbox.get()
            if item is None:
                break
            future, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(evaluator.evaluate(*args[:2], backend=args[2]))
            except BaseException as e:  # noqa: BLE001 - the pool replaces a host whose harness failed
                future.set_exception(e)
        if not self._stopped.is_set():  # abandon() closes the evaluators itself, without waiting for a lane
            evaluator.close()

    def submit(self, problem, text: str, backend: str) -> Future:
        future: Future = Future()
        self._inbox.put((future, (problem, text, backend)))
        return future

    def abandon(self) -> None:
        """A lane stuck in a candidate is cut by closing its Evaluator (which ends the candidate's
        processes); the thread then finds its inbox closed."""
        self._stopped.set()
        for _ in self._threads:
            self._inbox.put(None)
        with self._mutex:
            evaluators = list(self._evaluators)
        for evaluator in evaluators:
            threading.Thread(target=evaluator.close, daemon=True).start()

    def close(self) -> None:
        for _ in self._threads:
            self._inbox.put(None)
        for t in self._threads:
            t.join(timeout=60)


class RayHost:
    """A handle on one Ray actor of `actor_cls` (default: RayEvaluators) with `options` from the caller:
    resources (num_gpus, num_cpus, a custom resource) or a placement-group slot."""

    def __init__(self, cfg: EvalConfig, lanes: int = 1, options: dict | None = None, actor_cls=None,
                 reward_section: str = ""):
        actor_cls = actor_cls or ray_evaluators_actor()
        self.actor = actor_cls.options(**(options or {}), max_concurrency=lanes).remote(
            cfg, evaluators=lanes, **({"reward_section": reward_section} if reward_section else {}))
        self.ready: Future = self.actor.__ray_ready__.remote().future()

    def submit(self, problem, text: str, backend: str) -> Future:
        return self.actor.evaluate.remote(problem, text, backend).future()

    def abandon(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)

    def close(self) -> None:
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - a host that cannot close is killed below anyway
            pass
        ray.kill(self.actor)


class RayEvaluators:
    """The actor: `evaluators` Evaluators on the device Ray gave it, one per concurrent call (the actor's
    max_concurrency); their device gate lets one time at once."""

    def __init__(self, cfg: EvalConfig, evaluators: int = 1, reward_section: str = ""):
        import os

        if reward_section:
            cfg.require_reward_grade(reward_section)  # its verdicts become rewards, however it was made
        if cfg.on_cpu:
            os.environ["TRITON_INTERPRET"] = "1"  # Triton kernels run under the interpreter on CPU
        from kbencheval.eval.config import device_memory_per_evaluator

        self.evaluators = start_evaluators(device_memory_per_evaluator(cfg, evaluators), evaluators)
        self.free: queue.Queue = queue.Queue()
        for evaluator in self.evaluators:
            self.free.put(evaluator)

    def evaluate(self, problem, text: str, backend: str):
        evaluator = self.free.get()
        try:
            result = evaluator.evaluate(problem, text, backend=backend)
        finally:
            self.free.put(evaluator)
        import ray

        result.checks["node"] = ray.get_runtime_context().get_node_id()[:12]  # which node judged it
        return result

    def close(self) -> None:
        for evaluator in self.evaluators:
            evaluator.close()


_ACTOR = None


def ray_evaluators_actor():
    """RayEvaluators as a Ray actor class, made on first use so that importing the pool needs no Ray."""
    global _ACTOR
    if _ACTOR is None:
        import ray

        _ACTOR = ray.remote(num_cpus=0)(RayEvaluators)
    return _ACTOR

