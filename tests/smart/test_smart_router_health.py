"""python -m pytest tests/smart/test_smart_router_health.py -q        (add -m slow for the real-run restart test)

rollout.router=sglang and the engine health check (issue #11): the REAL sglang-router (pip package
sglang-router) in front of two real `kbench serve` workers on CPU (tiny Qwen3): requests are spread
over both, a killed worker is noticed and dropped from the router, and the router process dies with
its owner. EngineFleet's restart/drop rules on fake engines; an embedded engine killed between steps of
a real GRPO run comes back serving the trainer's weights. Not run against real SGLang servers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import pytest
import requests

ray = pytest.importorskip("ray")

from kbencheval.config import ConfigError  # noqa: E402
from kbencheval.llm import SamplingParams  # noqa: E402
from smart.rollout.engines import EngineKind, engine_kind  # noqa: E402
from smart.rollout.engines.router import RouterError, SGLangRouter, check_router  # noqa: E402
from smart.rollout.health import EngineFleet, NoEnginesLeft  # noqa: E402
from tests.support import free_port, kbench_server  # noqa: E402

needs_router = pytest.mark.skipif(not __import__("importlib").util.find_spec("sglang_router"),
                                  reason="sglang-router not installed (pip install -e '.[sglang]')")
GEN = {"input_ids": [5, 17, 42, 99], "sampling_params": {"max_new_tokens": 2, "temperature": 0.0}}


@contextlib.contextmanager
def two_servers(model: str):
    with kbench_server(model) as a, kbench_server(model) as b:
        yield a, b


def _alive(pid: int) -> bool:
    """The process runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_until(done, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@needs_router
def test_router_spreads_requests_and_survives_a_killed_worker(tiny_model):
    with two_servers(tiny_model) as (a, b), SGLangRouter([a.url, b.url], request_timeout_s=60) as router:
        assert router.workers() == {a.url: True, b.url: True}
        before = (a.requests_served(), b.requests_served())
        for _ in range(6):
            out = requests.post(f"{router.url}/generate", json=GEN, timeout=60).json()
            assert len(out["output_ids"]) == 2
        spread = (a.requests_served() - before[0], b.requests_served() - before[1])
        assert spread == (3, 3), spread  # round_robin: every worker got its share
        b.proc.kill()
        b.proc.wait(timeout=10)
        for _ in range(3):  # the router retries on the live worker
            assert requests.post(f"{router.url}/generate", json=GEN, timeout=60).ok
        assert router.remove(b.url) and router.workers() == {a.url: True}
        assert requests.post(f"{router.url}/generate", json=GEN, timeout=60).ok
        pid = router.pid()
    assert not _alive(pid)  # closed: the process is gone


def test_router_setup_errors_are_one_line(monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RouterError) as info:
        check_router(url, timeout_s=2)
    assert "rollout.router_url" in str(info.value) and "\n" not in str(info.value)
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"needs the sglang_router package.*pip install"):
        check_router("")


def test_router_config_names_the_setting():
    from smart.config import RLConfig, from_dict

    def rl(**rollout):
        return from_dict(RLConfig, {"model_path": "m", "rollout": rollout})

    with pytest.raises(ConfigError, match="set rollout.engine=sglang"):
        rl(router="sglang")
    with pytest.raises(ConfigError, match="rollout.router_url is only used with rollout.router=sglang"):
        rl(engine="sglang", sglang_urls=["http://a:1"], router_url="http://r:1")
    with pytest.raises(ConfigError, match="rollout.health_timeout_s"):
        rl(health_timeout_s=-1)
    assert rl(engine="sglang", sglang_urls=["http://a:1"], router="sglang").rollout.router == "sglang"


@needs_router
def test_dead_server_is_dropped_from_engines_and_router(tiny_model, local_ray, tmp_path):
    """engine=sglang + router=sglang through EngineFleet: generation goes through the router, a killed
    server is dropped (and deregistered), pushes still reach the live server, the router dies with the run."""
    from smart.config import RLConfig

    with two_servers(tiny_model) as (a, b):
        cfg = RLConfig(model_path=tiny_model, out_dir=str(tmp_path))
        cfg.cluster.rollout_num_engines = 2
        cfg.rollout.engine, cfg.rollout.sglang_urls, cfg.rollout.router = "sglang", [a.url, b.url], "sglang"
        cfg.rollout.health_timeout_s = 3.0
        cfg.validate()
        fleet = EngineFleet(engine_kind("sglang"), cfg, [])
        try:
            router = ray.get(fleet.engines[0].__ray_call__.remote(lambda engine: engine.router))
            router_pid, router_url = ray.get([router.pid.remote(), router.endpoint.remote()])
            del router  # the engines hold the only handles now, as in a run
            assert _alive(router_pid)
            greedy = SamplingParams(temperature=0.0, max_new_tokens=2)
            before = a.requests_served() + b.requests_served()
            ray.get([e.generate_ids.remote([[5, 6, 7]] * 2, greedy) for e in fleet.engines])
            assert a.requests_served() + b.requests_served() - before == 4 and min(
                a.requests_served(), b.requests_served()) > 0  # through the router, onto both servers
            assert fleet.check() == {"engines/alive": 2.0, "engines/restarts": 0.0, "engines/drops": 0.0}
            # Both have answered a start ping (async: on a slow machine it can still be in flight, and an
            # engine that has not answered yet counts as starting, not dead); from here one check decides.
            assert _wait_until(lambda: fleet.check()["engines/alive"] == 2.0 and all(fleet.started))
            b.proc.kill()
            b.proc.wait(timeout=10)
            assert fleet.check() == {"engines/alive": 1.0, "engines/restarts": 0.0, "engines/drops": 1.0}
            [live] = fleet.engines
            out = ray.get(live.generate_ids.remote([[5, 6, 7]] * 3, greedy))
            assert all(c.token_ids and not c.error for c in out)
            listed = requests.get(f"{router_url}/workers", timeout=5).json()
            assert [w["url"] for w in listed["workers"]] == [a.url]  # deregistered from the router
        finally:
            fleet.shutdown()
        assert _wait_until(lambda: not _alive(router_pid)), "the router outlived its engines"


# ---- EngineFleet's rules on fake engines (fast) ----

@ray.remote(num_cpus=0)
class FakeEngine:
    def __init__(self, start_s: float = 0.0):
        time.sleep(start_s)  # loading a model: pings queue behind the constructor
        self.version, self.got, self.retired = 0, None, False

    def health(self, timeout_s):
        pass

    def push(self, weights, version):
        self.got, self.version = weights, version
        return version

    def weights_version(self):
        return self.version

    def received(self):
        return self.got

    def retire(self):
        self.retired = True

    def close(self):
        pass


def _fleet(on_dead: str, n: int = 2, max_restarts: int = 3, start_s: float = 0.0,
           health_timeout_s: float = 5.0) -> EngineFleet:
    kind = EngineKind(needs_slots=on_dead == "restart", preflight=lambda cfg: None, weights_sink=lambda cfg: None,
                      start=lambda cfg, slots: [FakeEngine.remote(start_s) for _ in slots], on_dead=on_dead)
    rc = dataclasses.make_dataclass("RC", [("health_timeout_s", float), ("max_engine_restarts", int)])(
        health_timeout_s, max_restarts)
    cfg = dataclasses.make_dataclass("Cfg", [("rollout", object)])(rc)
    return EngineFleet(kind, cfg, [f"slot{i}" for i in range(n)])


def _kill(actor) -> None:
    """ray.kill, then wait until the actor answers no more: a call sent right after the kill can still
    run on a loaded machine (seen in CI), and the fleet's next ping would find it alive."""
    ray.kill(actor)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.health.remote(1.0), timeout=5)
        except Exception:  # noqa: BLE001 - dead, as wanted
            return
        time.sleep(0.05)
    raise AssertionError("ray.kill did not take effect within 30 s")


def test_fleet_restarts_a_dead_engine_with_the_current_weights(local_ray):
    fleet = _fleet("restart")
    weights = ray.put({"w": 7})
    fleet.record(4, weights)
    dead = fleet.engines[1]
    _kill(dead)
    assert fleet.check() == {"engines/alive": 2.0, "engines/restarts": 1.0, "engines/drops": 0.0}
    assert fleet.engines[1] is not dead and fleet.slots == ["slot0", "slot1"]
    assert ray.get(fleet.engines[1].weights_version.remote()) == 4
    assert ray.get(fleet.engines[1].received.remote()) == {"w": 7}  # the ref arrived as the weights
    fleet.shutdown()


def test_an_engine_still_starting_is_not_taken_for_dead(local_ray):
    """A start is not held to health_timeout_s (seen on the H100: a cold GPU engine missed the 10 s ping
    and was restarted, again and again); once it has answered, a dead engine is still found."""
    fleet = _fleet("restart", n=1, start_s=3.0, health_timeout_s=0.5)
    first = fleet.engines[0]
    deadline = time.monotonic() + 60
    while not fleet.started[0] and time.monotonic() < deadline:  # checks between steps, while it starts
        assert fleet.check()["engines/restarts"] == 0.0 and fleet.engines[0] is first
        time.sleep(0.5)
    assert fleet.started[0]
    _kill(first)
    assert fleet.check()["engines/restarts"] == 1.0 and fleet.engines[0] is not first
    fleet.shutdown()


def test_a_slow_starting_server_client_is_not_taken_for_dead(local_ray):
    """An engine without a slot (an SGLang client) is an actor too: on a loaded machine its worker process
    outlasted the ping while starting, and the run stopped with NoEnginesLeft. Its deadline starts when it
    has answered; a dead one is still dropped after that."""
    fleet = _fleet("drop", n=1, start_s=3.0, health_timeout_s=0.5)
    first = fleet.engines[0]
    assert fleet.check()["engines/drops"] == 0.0  # before: no answer within 0.5s, dropped, NoEnginesLeft
    assert ray.get(first.push.remote(None, 0)) == 0  # the first sync waits for the start ...
    fleet.record(0)  # ... and every engine has answered
    assert fleet.check() == {"engines/alive": 1.0, "engines/restarts": 0.0, "engines/drops": 0.0}
    _kill(first)
    with pytest.raises(NoEnginesLeft):
        fleet.check()


def test_a_starting_engine_does_not_hold_up_finding_a_dead_one(local_ray):
    fleet = _fleet("drop", n=1, health_timeout_s=0.5)  # a started engine (an SGLang client) ...
    fleet.engines.append(FakeEngine.remote(8.0))  # ... and one still loading its model for 8 s
    fleet.slots.append(None)
    fleet.started.append(False)
    fleet.start_pings.append(None)
    _kill(fleet.engines[0])
    clock = time.monotonic()
    assert fleet.check()["engines/drops"] == 1.0  # before: waited for the loading engine's first answer
    assert time.monotonic() - clock < 5 and len(fleet.engines) == 1 and not fleet.started[0]
    fleet.shutdown()


def test_fleet_drops_dead_engines_then_fails_clearly(local_ray):
    fleet = _fleet("drop", n=2)
    _kill(fleet.engines[0])
    assert fleet.check()["engines/drops"] == 1.0 and len(fleet.engines) == 1
    _kill(fleet.engines[0])
    with pytest.raises(NoEnginesLeft, match="every rollout engine is dead"):
        fleet.check()
    restart_limited = _fleet("restart", n=1, max_restarts=0)  # past the restart budget: dropped
    _kill(restart_limited.engines[0])
    with pytest.raises(NoEnginesLeft):
        restart_limited.check()


@pytest.mark.slow  # two GRPO updates and a restarted embedded engine: ~35 s on 2 cores
def test_killed_embedded_engine_comes_back_with_the_trainers_weights(tiny_model, local_ray, tmp_path):
    import torch

    from smart.config import RLConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.ray.rollout_manager import RolloutManager
    from smart.rollout.engines import sync_weights

    cfg = RLConfig(model_path=tiny_model, out_dir=str(tmp_path / "run"))
    cfg.data.problems, cfg.data.heldout_fraction = ["L1_1_ReLU"], 0.0
    cfg.rollout.max_new_tokens, cfg.rollout.n_samples_per_prompt, cfg.rollout.prompts_per_step = 8, 2, 1
    cfg.rollout.prompt_style, cfg.train.lr = "zero_shot", 1e-2
    cfg.validate()
    placement = make_placement(cfg.cluster)
    actor = TrainGroup.for_run(cfg, placement.actor)
    manager = RolloutManager.remote(cfg, placement.rollout)
    try:
        sync_weights(actor, manager)
        for step in range(2):
            samples, metrics = ray.get(manager.generate.remote(step))
            actor.train_grpo(samples, [1.0, -1.0], actor.compute_logprobs(samples))
            assert sync_weights(actor, manager) == step + 1
            if step == 0:  # between steps: the engine dies
                [engine] = ray.get(manager.weight_targets.remote())[1]
                _kill(engine)  # dead before the next step's check looks, as a death between steps is
        metrics = ray.get(manager.check_engines.remote())
        assert metrics["engines/restarts"] == 1.0 and metrics["engines/alive"] == 1.0
        assert ray.get(manager.weights_versions.remote()) == [2]
        served, trained = ray.get(manager.engine_state_dict.remote()), ray.get(actor.weights_ref())
        assert all(torch.equal(served[k], trained[k]) for k in trained)
        fresh, _ = ray.get(manager.generate.remote(2))
        assert {s.weight_version for s in fresh} == {2} and all(s.response_token_ids for s in fresh)
    finally:
        ray.get(manager.shutdown.remote())
        ray.kill(manager)
        actor.shutdown()
        ray.util.remove_placement_group(placement.pg)
