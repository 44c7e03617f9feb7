"""python -m pytest tests/smart/test_smart_sglang_engine.py -q

SGLangEngineActor under a local Ray against `kbench serve` (our SGLang-compatible server) on a real
tiny Qwen3 on CPU: native /generate with token ids, weight updates from disk, clear setup errors.
Not run against a real SGLang server (not installable here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from kbencheval.config import ConfigError  # noqa: E402
from kbencheval.llm import SamplingParams  # noqa: E402
from kbencheval.llm.embedded import EmbeddedEngine  # noqa: E402
from smart.rollout.engines.sglang import SGLangEngineActor, SGLangUnreachable, check_server  # noqa: E402
from tests.support import free_port, kbench_server  # noqa: E402

PROMPTS = [[5, 17, 42, 99, 7], [3, 8, 200, 11, 64, 12, 90]]


@pytest.fixture(scope="module")
def server(tiny_model):
    with kbench_server(tiny_model) as served:
        yield served.url


@pytest.fixture(scope="module")
def engine(server, tiny_model, local_ray):
    actor = SGLangEngineActor.remote(server, tiny_model, 60.0)
    yield actor
    ray.kill(actor)


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens on a port just released


def test_generate_ids_matches_the_embedded_engine(engine, tiny_model):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    out = ray.get(engine.generate_ids.remote(PROMPTS, greedy))
    assert len(out) == len(PROMPTS)
    torch.set_num_threads(1)
    local = EmbeddedEngine(tiny_model, device="cpu").generate_ids(PROMPTS, greedy)
    for c, ref, prompt in zip(out, local, PROMPTS):
        assert not c.error and c.prompt_token_ids == prompt
        assert c.token_ids and len(c.logprobs) == len(c.token_ids)
        # Same ids and logprobs as the in-process engine: the ids crossed HTTP untouched (no re-tokenizing).
        assert c.token_ids == ref.token_ids
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.logprobs)) < 1e-4
        assert all(lp <= 0 for lp in c.logprobs)


def test_sampling_seeds_per_row(engine):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    first = ray.get(engine.generate_ids.remote([PROMPTS[0]] * 3, params))
    again = ray.get(engine.generate_ids.remote([PROMPTS[0]] * 3, params))
    assert [c.token_ids for c in first] == [c.token_ids for c in again]  # same seeds, same samples
    assert len({tuple(c.token_ids) for c in first}) > 1  # row i uses seed + i, so rows differ


def test_update_weights_from_disk_changes_outputs_and_version(engine, server, tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    [before] = ray.get(engine.generate_ids.remote(PROMPTS[:1], greedy))
    server_version = requests.get(f"{server}/health").json()["weights_version"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "v7")
    assert ray.get(engine.weights_version.remote()) == 0
    assert ray.get(engine.push.remote(str(tmp_path / "v7"), 7)) == 7
    assert ray.get(engine.weights_version.remote()) == 7
    assert requests.get(f"{server}/health").json()["weights_version"] == server_version + 1  # the server loaded it
    [after] = ray.get(engine.generate_ids.remote(PROMPTS[:1], greedy))
    assert after.logprobs != before.logprobs
    with pytest.raises(RuntimeError, match="refused"):  # a bad folder leaves the version alone
        ray.get(engine.push.remote(str(tmp_path / "missing"), 8))
    assert ray.get(engine.weights_version.remote()) == 7


def test_state_dict_is_a_clear_error(engine):
    with pytest.raises(NotImplementedError, match="rollout.engine=embedded"):
        ray.get(engine.state_dict.remote())


def test_unreachable_server_names_url_and_fix(tiny_model, local_ray):
    url = _dead_url()
    with pytest.raises(SGLangUnreachable) as info:
        check_server(url, timeout_s=2)
    message = str(info.value)
    assert f"{url}/health" in message and "kbench serve" in message and "sglang.launch_server" in message
    assert "\n" not in message
    actor = SGLangEngineActor.remote(url, tiny_model)
    with pytest.raises(Exception, match="cannot reach the SGLang server"):
        ray.get(actor.weights_version.remote())


def test_config_requires_one_url_per_engine():
    from smart.config import RLConfig, from_dict

    def rl(**rollout):
        return from_dict(RLConfig, {"model_path": "m", "rollout": rollout})

    with pytest.raises(ConfigError, match="needs rollout.sglang_urls"):
        rl(engine="sglang")
    with pytest.raises(ConfigError, match="one server URL per engine"):
        rl(engine="sglang", sglang_urls=["http://a:1", "http://b:2"])
    assert rl(engine="sglang", sglang_urls=["http://a:1"]).rollout.sglang_urls == ["http://a:1"]
    assert rl().rollout.engine == "embedded"


@pytest.mark.slow  # a full RL step plus a disk sync: ~60 s
def test_rl_step_syncs_trainer_weights_to_the_server_through_disk(server, tiny_model, local_ray, tmp_path):
    """One GRPO update, then the weight sync smart.train uses for engine=sglang: the server loads the
    trainer's exported folder, the engines report the trainer's version, the older folder is removed."""
    from safetensors.torch import load_file

    from smart.config import RLConfig
    from smart.backends import logprob_mismatch
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.ray.rollout_manager import RolloutManager
    from smart.rollout.engines import sync_weights

    cfg = RLConfig(model_path=tiny_model, out_dir=str(tmp_path / "run"))
    cfg.data.problems, cfg.data.heldout_fraction = ["L1_1_ReLU"], 0.0
    cfg.rollout.engine, cfg.rollout.sglang_urls = "sglang", [server]
    cfg.rollout.max_new_tokens, cfg.rollout.n_samples_per_prompt, cfg.rollout.prompts_per_step = 8, 2, 1
    cfg.rollout.prompt_style = "zero_shot"
    cfg.train.lr = 1e-2
    cfg.validate()
    disk = Path(cfg.out_dir) / "engine_weights"
    placement = make_placement(cfg.cluster)
    actor = TrainGroup.for_run(cfg, placement.actor)
    manager = RolloutManager.remote(cfg, placement.rollout)
    try:
        assert sync_weights(actor, manager) == 0  # the run's first sync: engines start from the trainer
        server_version = requests.get(f"{server}/health").json()["weights_version"]
        samples, _ = ray.get(manager.generate.remote(0))
        assert all(s.response_token_ids and len(s.rollout_logprobs) == len(s.response_token_ids) for s in samples)
        assert {s.weight_version for s in samples} == {0}
        actor.train_grpo(samples, [1.0, -1.0], actor.compute_logprobs(samples))
        assert sync_weights(actor, manager) == 1
        assert ray.get(manager.weights_versions.remote()) == [1]
        assert requests.get(f"{server}/health").json()["weights_version"] == server_version + 1
        assert sorted(p.name for p in disk.iterdir()) == ["v000001"]  # v000000 removed after the sync
        trainer_sd = ray.get(actor.weights_ref())
        on_disk = load_file(disk / "v000001" / "model.safetensors")
        assert all(torch.equal(on_disk[k], trainer_sd[k]) for k in on_disk)
        # The server now samples from the trainer's weights: its logprobs match the trainer's recomputation.
        fresh, _ = ray.get(manager.generate.remote(1))
        assert {s.weight_version for s in fresh} == {1}
        new_gap, old_gap = (logprob_mismatch(x, actor.compute_logprobs(x)) for x in (fresh, samples))
        print(f"mean |server - trainer| logprob: after sync {new_gap:.2e}, stale samples {old_gap:.2e}")
        assert new_gap < 1e-4 and old_gap > 1e-3  # old samples came from the old weights
        with pytest.raises(Exception, match="rollout.engine=embedded"):
            ray.get(manager.engine_state_dict.remote())
    finally:
        ray.get(manager.shutdown.remote())
        ray.kill(manager)
        actor.shutdown()
        ray.util.remove_placement_group(placement.pg)
