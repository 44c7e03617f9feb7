"""python -m pytest tests/smart/test_weight_sync.py -q -m "slow or not slow"

Weight sync to SGLang-style servers without disk (rollout.sglang_weight_sync = tensor | distributed),
against real `kbench serve` processes on CPU: /update_weights_from_tensor (transports shm and bytes;
payloads and cuda_ipc: tests/smart/test_tensor_payloads.py) and the gloo process-group routes
(/init_weights_update_group, /update_weights_from_distributed, /destroy_weights_update_group). The
served weights are checked through served logprobs against an in-process engine holding the expected
weights, or exactly, tensor by tensor, against an in-process server. Not run against a real SGLang
server (not installable here).
"""

from __future__ import annotations

import glob
import os
import threading

import pytest
import requests

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from kbencheval.llm import SamplingParams  # noqa: E402
from kbencheval.llm import weight_transfer as wt  # noqa: E402
from kbencheval.llm.embedded import EmbeddedEngine  # noqa: E402
from kbencheval.llm.weight_transfer import WeightGroup, dtype_name, encode_bytes  # noqa: E402
from smart.rollout.engines.weight_sync import push_tensors  # noqa: E402
from tests.support import kbench_server  # noqa: E402

PROMPT = [5, 17, 42, 99, 7]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)


@pytest.fixture(scope="module")
def server(tiny_model):
    with kbench_server(tiny_model) as served:
        yield served.url


@pytest.fixture(scope="module")
def reference(tiny_model):
    torch.set_num_threads(1)
    return EmbeddedEngine(tiny_model, device="cpu")


def perturbed(engine: EmbeddedEngine, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in engine.state_dict().items()}


def served_logprobs(url: str) -> list[float]:
    body = {"input_ids": PROMPT, "sampling_params": {"temperature": 0.0, "max_new_tokens": 6}, "return_logprob": True}
    meta = requests.post(f"{url}/generate", json=body, timeout=60).json()["meta_info"]
    return [lp for lp, _, _ in meta["output_token_logprobs"]]


def expected_logprobs(engine: EmbeddedEngine, state: dict) -> list[float]:
    engine.update_weights(state, engine.weights_version + 1)
    return engine.generate_ids([PROMPT], GREEDY)[0].logprobs


def assert_serves(url: str, expected: list[float]) -> None:
    got = served_logprobs(url)
    assert len(got) == len(expected) and max(abs(a - b) for a, b in zip(got, expected)) < 1e-5


def groups_of(url: str) -> list[str]:
    return requests.get(f"{url}/health", timeout=10).json()["weight_update_groups"]


def server_version(url: str) -> int:
    return requests.get(f"{url}/health", timeout=10).json()["weights_version"]


def shm_files() -> set[str]:
    return set(glob.glob(os.path.join(wt.SHM_DIR, "kbench-weights-*")))


def tensor_post(url: str, payload, **fields) -> requests.Response:
    body = {"serialized_named_tensors": [payload], "flush_cache": True, **fields}
    return requests.post(f"{url}/update_weights_from_tensor", json=body, timeout=30)


@pytest.mark.parametrize("transport", ["shm", "bytes"])
def test_tensor_route_loads_buckets_and_refuses_bad_requests(transport, server, reference):
    state = perturbed(reference, seed=1 if transport == "shm" else 3)
    before, files = server_version(server), shm_files()
    push_tensors(server, state, 5, bucket_bytes=64 << 10, timeout_s=60, transport=transport)  # several buckets
    loads = server_version(server) - before
    assert loads > 1  # one load per bucket request
    assert shm_files() == files  # the sender removed its shm files
    expected = expected_logprobs(reference, state)
    assert_serves(server, expected)
    name, weight = next(iter(state.items()))
    for bad, why in [([("model.no_such.weight", weight)], "unknown names"),
                     ([(name, torch.zeros(3, 3))], "has shape"),
                     ([(name, weight + 1.0), ("model.no_such.weight", weight)], "unknown names")]:
        path, payload = wt.write_shm(bad) if transport == "shm" else (None, encode_bytes(bad))
        resp = tensor_post(server, payload)
        if path:
            wt.unlink_shm(path)
        reply = resp.json()
        assert resp.status_code == 400 and reply["success"] is False and why in reply["error"]["message"]
    assert server_version(server) - before == loads  # nothing refused was loaded, even partly
    assert_serves(server, expected)


def test_read_back_answers_both_names_of_a_tied_weight(server, reference):
    """Qwen3 ties lm_head to embed_tokens: one parameter, and the trainer's state dict names it twice."""
    state = perturbed(reference, seed=5)
    assert "lm_head.weight" in state  # the tiny model is tied, as Qwen3's small sizes are
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # as a trainer's state dict holds it
    push_tensors(server, state, 5, bucket_bytes=64 << 10, timeout_s=60, transport="bytes")
    pushed = state["model.embed_tokens.weight"].flatten()[:16].float().tolist()
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        got = requests.post(f"{server}/get_weights_by_name", json={"name": name, "truncate_size": 16}, timeout=30)
        assert got.status_code == 200 and got.json() == pushed, name
    got = requests.post(f"{server}/get_weights_by_name", json={"name": "lm_head.bias"}, timeout=30)
    assert got.status_code == 400 and "no parameter 'lm_head.bias'" in got.json()["error"]["message"]


def _broadcaster(store, name: str, tensors: list, errors: list) -> threading.Thread:
    def run():
        try:
            group = WeightGroup.join("127.0.0.1", store.port, 0, 2, "gloo", name, 30, store=store)
            for batch in tensors:
                group.send(batch)
            group.close()
        except Exception as exc:  # the test asserts on it
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _update(url: str, name: str, named: list) -> requests.Response:
    body = {"names": [n for n, _ in named], "dtypes": [dtype_name(t.dtype) for _, t in named],
            "shapes": [list(t.shape) for _, t in named], "group_name": name, "flush_cache": True, "weight_version": "3"}
    return requests.post(f"{url}/update_weights_from_distributed", json=body, timeout=60)


def test_distributed_routes_receive_a_gloo_broadcast_and_refuse_bad_requests(server, reference):
    """The test process is the trainer's rank 0: it forms a two-rank gloo group with the server and
    broadcasts a good bucket, then an unknown name and a wrong shape (received, then refused)."""
    state = perturbed(reference, seed=2)
    name, weight = next(iter(state.items()))
    good, unknown, wrong = list(state.items()), [("model.no_such.weight", weight)], [(name, torch.zeros(2, 2))]
    store, errors = WeightGroup.master_store("127.0.0.1", 30), []
    sender = _broadcaster(store, "g-test", [[t for _, t in b] for b in (good, unknown, wrong)], errors)
    init = requests.post(f"{server}/init_weights_update_group", timeout=60, json={
        "master_address": "127.0.0.1", "master_port": store.port, "rank_offset": 1, "world_size": 2,
        "group_name": "g-test", "backend": "gloo"}).json()
    assert init["success"] is True, init
    before = server_version(server)
    assert _update(server, "g-test", good).json()["success"] is True
    assert server_version(server) == before + 1
    expected = expected_logprobs(reference, state)
    for named, why in [(unknown, "unknown names"), (wrong, "has shape")]:
        resp = _update(server, "g-test", named)
        assert resp.status_code == 400 and resp.json()["success"] is False and why in resp.json()["error"]["message"]
    sender.join(30)
    assert not sender.is_alive() and not errors
    assert server_version(server) == before + 1
    assert_serves(server, expected)  # the refused buckets changed nothing
    missing = _update(server, "no-such-group", good).json()  # refused before any receive: no hang
    assert missing["success"] is False and "init_weights_update_group" in missing["error"]["message"]
    bad_init = requests.post(f"{server}/init_weights_update_group", json={"master_address": "127.0.0.1"}, timeout=30).json()
    assert bad_init["success"] is False and "master_port" in bad_init["error"]["message"]
    done = requests.post(f"{server}/destroy_weights_update_group", json={"group_name": "g-test"}, timeout=30).json()
    assert done["success"] is True
    again = requests.post(f"{server}/destroy_weights_update_group", json={"group_name": "g-test"}, timeout=30).json()
    assert again["success"] is False


def test_a_trainer_that_died_fails_the_update_fast_and_drops_the_group(server, reference):
    """Rank 0 joins from a process that then exits: the server's receive errors at once (no wait for the
    group timeout), answers success: false and forgets the broken group."""
    import subprocess
    import sys
    import time

    from tests.support import ENV

    store = WeightGroup.master_store("127.0.0.1", 30)
    code = (f"from kbencheval.llm.weight_transfer import WeightGroup\n"
            f"WeightGroup.join('127.0.0.1', {store.port}, 0, 2, 'gloo', 'g-dead', 30)\n")
    trainer = subprocess.Popen([sys.executable, "-c", code], env=ENV)
    init = requests.post(f"{server}/init_weights_update_group", timeout=60, json={
        "master_address": "127.0.0.1", "master_port": store.port, "rank_offset": 1, "world_size": 2,
        "group_name": "g-dead", "backend": "gloo"}).json()
    assert init["success"] is True and trainer.wait(timeout=30) == 0
    before, started = server_version(server), time.monotonic()
    reply = _update(server, "g-dead", list(reference.state_dict().items())[:1]).json()
    assert reply["success"] is False and "re-initialize" in reply["error"]["message"]
    assert time.monotonic() - started < 10 and "g-dead" not in groups_of(server)
    assert server_version(server) == before


def perturb_trainer(backend, seed: int) -> None:
    """Runs in a trainer rank (TrainRank.run): new weights, as an optimizer step would make."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in backend.model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen).to(p.device))


@pytest.mark.parametrize("mode", ["tensor", "tensor-bytes", "distributed"])
def test_trainer_weights_reach_two_servers(mode, tiny_model, server, reference, local_ray):
    """A real trainer group (torch backend): perturb its weights, sync through this mode's sink and engine
    push to two `kbench serve` processes; both serve the trainer's weights, then the group is torn down.
    tensor picks shm here (one host); tensor-bytes forces the by-value fallback."""
    from smart.config import RLConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.rollout.engines.sglang import KIND, SGLangEngineActor

    sync, transport = (mode.split("-") + ["auto"])[:2]
    cfg = RLConfig(model_path=tiny_model, out_dir="/nonexistent")
    cfg.rollout.engine, cfg.rollout.sglang_urls, cfg.rollout.sglang_weight_sync = "sglang", [server], sync
    cfg.rollout.weight_bucket_mb = 0.25
    placement = make_placement(cfg.cluster)
    trainer = TrainGroup.for_run(cfg, placement.actor)
    files = shm_files()
    try:
        with kbench_server(tiny_model) as second:
            engines = [SGLangEngineActor.remote(url, tiny_model, 60.0, weight_sync=sync, tensor_transport=transport)
                       for url in (server, second.url)]
            for version, seed in [(1, 11), (2, 12)]:  # the second sync reuses the distributed groups
                trainer.run_on_ranks(perturb_trainer, seed)
                sink = KIND.weights_sink(cfg)
                packed = sink.pack(trainer, version)
                assert len(packed.buckets) > 1
                assert ray.get([e.push.remote(packed, version) for e in engines], timeout=120) == [version] * 2
                sink.release(version)
                assert shm_files() == files  # release removed the shm files both servers read
            via = {"tensor": "shm", "tensor-bytes": "bytes", "distributed": "distributed"}[mode]
            assert ray.get([e.weight_transport.remote() for e in engines]) == [via, via]
            expected = expected_logprobs(reference, ray.get(trainer.weights_ref()))
            for url in (server, second.url):
                assert_serves(url, expected)
            groups = [len(groups_of(url)) for url in (server, second.url)]
            assert groups == ([1, 1] if mode == "distributed" else [0, 0])  # one group per server, kept between syncs
            # The end of the run (close) and a dropped server (retire) destroy the group on both sides.
            ray.get([engines[0].close.remote(), engines[1].retire.remote()], timeout=60)
            assert [groups_of(url) for url in (server, second.url)] == [[], []]
            assert ray.get(engines[0].push.remote(sink.pack(trainer, 3), 3), timeout=120) == 3  # a new group forms
            sink.release(3)
            assert_serves(server, expected)
            ray.get(engines[0].close.remote(), timeout=60)
    finally:
        trainer.shutdown()
        ray.util.remove_placement_group(placement.pg)


@pytest.mark.parametrize("transport", ["shm", "bytes"])
def test_weights_that_arrive_equal_the_trainers_exactly(transport, tiny_model, local_ray):
    """Trainer group -> engine actor -> an in-process kbench serve: every served tensor equals the trainer's
    state dict (torch.equal), and tensors the trainer did not change stay as they were."""
    from kbencheval.llm.serve import KBenchServer
    from smart.config import RLConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.rollout.engines.sglang import KIND, SGLangEngineActor

    engine = EmbeddedEngine(tiny_model, device="cpu")
    httpd = KBenchServer(("127.0.0.1", 0), engine, tiny_model)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    cfg = RLConfig(model_path=tiny_model, out_dir="/nonexistent")
    cfg.rollout.engine, cfg.rollout.sglang_urls, cfg.rollout.sglang_weight_sync = "sglang", [url], "tensor"
    cfg.rollout.weight_bucket_mb = 0.1
    placement = make_placement(cfg.cluster)
    trainer = TrainGroup.for_run(cfg, placement.actor)
    try:
        trainer.run_on_ranks(perturb_trainer, 21)
        pusher = SGLangEngineActor.remote(url, tiny_model, 60.0, weight_sync="tensor", tensor_transport=transport)
        sink = KIND.weights_sink(cfg)
        assert ray.get(pusher.push.remote(sink.pack(trainer, 1), 1), timeout=120) == 1
        sink.release(1)
        sent, served = ray.get(trainer.weights_ref()), engine.state_dict()
        assert set(sent) <= set(served)
        for name, tensor in sent.items():
            assert served[name].dtype == tensor.dtype and torch.equal(served[name], tensor), name
    finally:
        trainer.shutdown()
        ray.util.remove_placement_group(placement.pg)
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.slow  # a full RL step plus two syncs: ~10 s each after Ray's start (tier of the disk test)
@pytest.mark.parametrize("mode", ["tensor", "distributed"])
def test_rl_step_syncs_trainer_weights_without_disk(mode, server, tiny_model, local_ray, tmp_path):
    """One GRPO update, then smart.train's sync: the server serves the trainer's weights (its logprobs match
    the trainer's recomputation), nothing is written to disk, and the run's end destroys the group."""
    from smart.backends import logprob_mismatch
    from smart.config import RLConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.ray.rollout_manager import RolloutManager
    from smart.rollout.engines import sync_weights

    cfg = RLConfig(model_path=tiny_model, out_dir=str(tmp_path / "run"))
    cfg.data.problems, cfg.data.heldout_fraction = ["L1_1_ReLU"], 0.0
    cfg.rollout.engine, cfg.rollout.sglang_urls, cfg.rollout.sglang_weight_sync = "sglang", [server], mode
    cfg.rollout.max_new_tokens, cfg.rollout.n_samples_per_prompt, cfg.rollout.prompts_per_step = 8, 2, 1
    cfg.rollout.prompt_style, cfg.rollout.weight_bucket_mb, cfg.train.lr = "zero_shot", 0.5, 1e-2
    cfg.validate()
    placement = make_placement(cfg.cluster)
    actor = TrainGroup.for_run(cfg, placement.actor)
    manager = RolloutManager.remote(cfg, placement.rollout)
    try:
        assert sync_weights(actor, manager) == 0
        samples, _ = ray.get(manager.generate.remote(0))
        actor.train_grpo(samples, [1.0, -1.0], actor.compute_logprobs(samples))
        assert sync_weights(actor, manager) == 1
        assert ray.get(manager.weights_versions.remote()) == [1]
        fresh, _ = ray.get(manager.generate.remote(1))
        assert {s.weight_version for s in fresh} == {1}
        new_gap, old_gap = (logprob_mismatch(x, actor.compute_logprobs(x)) for x in (fresh, samples))
        print(f"{mode}: mean |server - trainer| logprob: after sync {new_gap:.2e}, stale samples {old_gap:.2e}")
        assert new_gap < 1e-4 and old_gap > 1e-3
        assert not (tmp_path / "run" / "engine_weights").exists()
        assert len(groups_of(server)) == (1 if mode == "distributed" else 0)
    finally:
        ray.get(manager.shutdown.remote())
        ray.kill(manager)
        actor.shutdown()
        ray.util.remove_placement_group(placement.pg)
    assert groups_of(server) == []


def test_config_names_the_setting_to_change():
    from kbencheval.config import ConfigError
    from smart.config import RLConfig, from_dict

    def rl(**rollout):
        return from_dict(RLConfig, {"model_path": "m", "rollout": rollout})

    assert rl().rollout.sglang_weight_sync == "disk"
    with pytest.raises(ConfigError, match="set rollout.engine=sglang or rollout.sglang_weight_sync=disk"):
        rl(sglang_weight_sync="tensor")
    with pytest.raises(ConfigError, match="rollout.weight_bucket_mb must be > 0"):
        rl(engine="sglang", sglang_urls=["http://a:1"], sglang_weight_sync="distributed", weight_bucket_mb=0)
    with pytest.raises(ConfigError, match="sglang_weight_sync"):
        rl(engine="sglang", sglang_urls=["http://a:1"], sglang_weight_sync="nccl")
    assert rl(engine="sglang", sglang_urls=["http://a:1"], sglang_weight_sync="distributed").rollout.weight_bucket_mb == 512
