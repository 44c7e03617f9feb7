"""`EngineFleet`: the rollout manager's engines, their slots and the weights they last got, kept alive.

    fleet = EngineFleet(engine_kind(cfg.rollout.engine), cfg, slots)   # starts the engines
    metrics = fleet.check()          # between steps: ping each engine, restart or drop the dead ones
    fleet.record(version, packed)    # after a sync: what a restarted engine must be sent

A ping is `Engine.health` answered within rollout.health_timeout_s (an embedded engine answers from its
actor; an SGLang engine asks its server's /health). What happens to a dead engine is its kind's
`on_dead`: "restart" (embedded) starts a new actor on the same slot and pushes it the current weights,
so it serves the trainer's version; "drop" (SGLang) takes its server out of the router, warns, and the
run goes on with the rest. No engine left is an error. The ping's deadline holds from an engine's first
answer (its start ping, or the first sync's push) on: before it, a slow start is not a death. The counts appear in the step metrics as
engines/alive, engines/restarts and engines/drops.
"""

from __future__ import annotations

import sys
import time

import ray

from smart.rollout.engines import EngineKind

RESTART_TIMEOUT_S = 600.0  # a new embedded engine loads the model, then the weights
# An engine's first answer comes after its start (imports, CUDA, the model): a cold GPU engine can take
# longer than a short ping allows, and would be restarted, again and again, while it was only starting.
START_TIMEOUT_S = 600.0


class NoEnginesLeft(RuntimeError):
    """Every engine died; the run cannot generate."""


class EngineFleet:
    def __init__(self, kind: EngineKind, cfg, slots: list):
        self.kind, self.cfg, self.rc = kind, cfg, cfg.rollout
        self.engines = list(kind.start(cfg, slots))
        self.slots = list(slots) if kind.needs_slots else [None] * len(self.engines)
        # Answered once: from then on a ping has health_timeout_s. Until then the actor may still be starting
        # (an embedded engine loads its model; any engine's worker process starts and imports, which on a
        # loaded machine outlasts a ping), so the deadline counts from the first answer, not the start.
        self.started = [False] * len(self.engines)
        # An engine that has not answered yet has one start ping in flight, across checks: (ref, sent at).
        self.start_pings: list = [None] * len(self.engines)
        self.packed, self.version = None, 0  # what the last sync pushed (None: the engines' own start weights)
        self.restarts = self.drops = 0

    def record(self, version: int, packed=None) -> None:
        """The engines now serve `version`, pushed as `packed` (a WeightSink.pack result): each has answered."""
        self.version, self.packed = version, packed
        self.started, self.start_pings = [True] * len(self.engines), [None] * len(self.engines)

    def metrics(self) -> dict:
        return {"engines/alive": float(len(self.engines)), "engines/restarts": float(self.restarts),
                "engines/drops": float(self.drops)}

    def check(self) -> dict:
        """Ping every engine; restart or drop the dead ones (see the module doc); returns metrics()."""
        timeout_s = self.rc.health_timeout_s
        if timeout_s > 0 and self.engines:
            for i, reason in reversed(self.dead(timeout_s)):
                self._recover(i, reason)
            if not self.engines:
                raise NoEnginesLeft(f"every rollout engine is dead (restarts {self.restarts}, drops {self.drops}); "
                                    "check the engine logs, restart the servers in rollout.sglang_urls, or raise "
                                    "rollout.max_engine_restarts")
        return self.metrics()

    def dead(self, timeout_s: float) -> list[tuple[int, str]]:
        """(index, why) of each engine that did not answer a ping within timeout_s, or, if it has never
        answered (it may still be starting), whose start ping found it dead or went unanswered for
        START_TIMEOUT_S. A starting engine never holds up the check of the others."""
        found = dict(self._starting())
        found.update(self._ping([i for i, ok in enumerate(self.started) if ok and i not in found], timeout_s))
        return sorted(found.items())

    def _starting(self) -> list[tuple[int, str]]:
        """Looks at (or sends) each unstarted engine's start ping without waiting for it."""
        found = []
        for i in [i for i, ok in enumerate(self.started) if not ok]:
            if self.start_pings[i] is None:
                self.start_pings[i] = (self.engines[i].health.remote(START_TIMEOUT_S), time.monotonic())
            ref, sent = self.start_pings[i]
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                if time.monotonic() - sent > START_TIMEOUT_S + 1.0:
                    found.append((i, f"no answer within {START_TIMEOUT_S:g}s of its start"))
                continue
            self.start_pings[i] = None
            try:
                ray.get(ref)
                self.started[i] = True
            except Exception as exc:  # it died while starting
                found.append((i, _one_line(exc)))
        return found

    def _ping(self, indices: list[int], timeout_s: float) -> list[tuple[int, str]]:
        if not indices:
            return []
        refs = {i: self.engines[i].health.remote(timeout_s) for i in indices}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s + 1.0)
        found = []
        for i, ref in refs.items():
            if ref not in ready:
                found.append((i, f"no answer within {timeout_s:g}s"))
                continue
            try:
                ray.get(ref)
                self.started[i] = True
            except Exception as exc:  # a dead actor, a server that stopped answering
                found.append((i, _one_line(exc)))
        return found

    def _recover(self, i: int, reason: str) -> None:
        engine = self.engines[i]
        if self.kind.on_dead == "restart" and self.restarts < self.rc.max_engine_restarts:
            ray.kill(engine)  # a hung actor frees its slot; a dead one is already gone
            self.engines[i] = self._restart(self.slots[i])  # waits for its start: it has answered
            self.started[i], self.start_pings[i] = True, None
            self.restarts += 1
            _warn(f"rollout engine {i} was dead ({reason}); restarted it with weights version {self.version}")
            return
        try:
            ray.get(engine.retire.remote(), timeout=60)
        except Exception as exc:  # a dead actor cannot retire; the router's own checks will mark its server
            _warn(f"rollout engine {i} could not retire ({_one_line(exc)})")
        ray.kill(engine)
        del self.engines[i], self.slots[i], self.started[i], self.start_pings[i]
        self.drops += 1
        _warn(f"rollout engine {i} was dead ({reason}); dropped it, {len(self.engines)} engine(s) left")

    def _restart(self, slot):
        [engine] = self.kind.start(self.cfg, [slot])
        if self.packed is None:  # never synced: a fresh engine serves the start weights, version 0
            ray.get(engine.weights_version.remote(), timeout=RESTART_TIMEOUT_S)
            return engine
        served = ray.get(engine.push.remote(self.packed, self.version), timeout=RESTART_TIMEOUT_S)
        if served != self.version:
            raise RuntimeError(f"a restarted engine reports weights version {served} after a push of {self.version}")
        return engine

    def shutdown(self) -> None:
        """Let every engine release what it holds outside its actor (Engine.close), briefly, then kill it."""
        if self.engines:
            ray.wait([e.close.remote() for e in self.engines], num_returns=len(self.engines), timeout=30.0)
        for e in self.engines:
            ray.kill(e)


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{exc.__class__.__name__}: {lines[-1][:300] if lines else ''}"


def _warn(message: str) -> None:
    print(f"smart rollout: warning: {message}", file=sys.stderr, flush=True)
