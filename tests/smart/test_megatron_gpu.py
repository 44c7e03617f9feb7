"""MegatronTrainBackend on GPUs: numerics against the torch backend, training, checkpoints, the RL driver.

    pytest -q -s -m gpu tests/smart/test_megatron_gpu.py            # one GPU; the 2-GPU cases skip
    pytest -q -s -m gpu tests/smart/test_megatron_gpu.py -k two_gpus   # TP=2, PP=2, CP=2, DP=2 against TP=1

All on random Qwen3 weights made here (vocab 1000 is not a multiple of 128, so the padded
vocabulary is masked in every softmax). `-s` prints the measured deltas.
"""

from __future__ import annotations

import gc
import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[megatron]')")
pytestmark = pytest.mark.gpu

from smart.backends.megatron.config import MegatronTrainConfig  # noqa: E402
from smart.backends.torch import TorchTrainBackend, TrainConfig  # noqa: E402
from smart.sample import Sample, SampleStatus  # noqa: E402

VOCAB = 1000


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory) -> str:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=32, tie_word_embeddings=False)
    path = tmp_path_factory.mktemp("qwen3-megatron")
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    return str(path)


def samples_for_test(n: int = 8, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r = rng.randint(8, 40), rng.randint(8, 60)
        mask = [1] * r
        if i % 3 == 1:  # environment tokens inside the response are not trained
            mask[2:6] = [0] * 4
        out.append(Sample(index=i, group_index=i // 2, prompt_token_ids=[rng.randrange(VOCAB) for _ in range(p)],
                          response_token_ids=[rng.randrange(VOCAB) for _ in range(r)], loss_mask=mask,
                          rollout_logprobs=[-7.0] * r, status=SampleStatus.COMPLETED))
    return out


def megatron(model_dir: str, **kw):
    from smart.backends.megatron.backend import MegatronTrainBackend

    return MegatronTrainBackend(MegatronTrainConfig(model_path=model_dir, dtype="bf16", **kw))


def _free(*backends):
    for b in backends:
        del b
    gc.collect()
    torch.cuda.empty_cache()


def _deltas(a: list[list[float]], b: list[list[float]]) -> torch.Tensor:
    return torch.tensor([abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)])


def test_logprobs_match_torch_backend(qwen3_dir):
    samples = samples_for_test()
    fp32 = TorchTrainBackend(TrainConfig(model_path=qwen3_dir, dtype="fp32")).compute_logprobs(samples)
    torch_bf16 = TorchTrainBackend(TrainConfig(model_path=qwen3_dir, dtype="bf16")).compute_logprobs(samples)
    mg = megatron(qwen3_dir, micro_batch_tokens=256)  # several micro-batches
    lp = mg.compute_logprobs(samples)
    assert [len(x) for x in lp] == [len(s.response_token_ids) for s in samples]
    d_torch, d_fp32, d_torch_fp32 = _deltas(lp, torch_bf16), _deltas(lp, fp32), _deltas(torch_bf16, fp32)
    print(f"\nmegatron bf16 vs torch bf16: max {d_torch.max():.4f} mean {d_torch.mean():.5f} | "
          f"megatron bf16 vs fp32: max {d_fp32.max():.4f} mean {d_fp32.mean():.5f} | "
          f"torch bf16 vs fp32: max {d_torch_fp32.max():.4f} mean {d_torch_fp32.mean():.5f}")
    assert d_torch.mean() < 0.02 and d_torch.max() < 0.2
    # Megatron's bf16 is no further from the fp32 answer than the torch backend's bf16 is.
    assert d_fp32.mean() <= 2 * d_torch_fp32.mean() + 1e-3
    _free(mg)


@pytest.mark.parametrize("kind", ["sft", "grpo"])
def test_one_step_matches_torch_backend(qwen3_dir, kind):
    """Same loss and gradient norm as the torch backend: the global normalisation is the same."""
    samples = samples_for_test(seed=1)
    adv = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.0, 1.5]

    def step(backend):
        if kind == "sft":
            return backend.train_sft(samples)
        return backend.train_grpo(samples, adv, [[lp - 0.05 for lp in x] for x in backend.compute_logprobs(samples)])

    t = step(TorchTrainBackend(TrainConfig(model_path=qwen3_dir, dtype="bf16", lr=1e-4)))
    mg = megatron(qwen3_dir, lr=1e-4, micro_batch_tokens=200)
    m = step(mg)
    print(f"\n{kind}: torch loss {t['loss']:.5f} grad_norm {t['grad_norm']:.5f} micro-batches {t['micro_batches']:.0f} | "
          f"megatron loss {m['loss']:.5f} grad_norm {m['grad_norm']:.5f} micro-batches {m['micro_batches']:.0f}")
    assert m["micro_batches"] > 1
    assert m["loss"] == pytest.approx(t["loss"], rel=0.02, abs=1e-3)
    assert m["grad_norm"] == pytest.approx(t["grad_norm"], rel=0.05)
    if kind == "grpo":
        assert m["ratio_mean"] == pytest.approx(t["ratio_mean"], rel=0.01)
        assert m["clip_frac"] == pytest.approx(t["clip_frac"], abs=0.02)
    _free(mg)


def test_sft_lowers_the_loss_and_changes_every_parameter(qwen3_dir):
    mg = megatron(qwen3_dir, lr=1e-3)
    samples = samples_for_test(4, seed=2)
    before = {k: v.detach().clone() for k, v in mg.model.module.named_parameters()}
    losses = [mg.train_sft(samples)["loss"] for _ in range(10)]
    print("\nsft losses", [round(x, 3) for x in losses])
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(not torch.equal(v, before[k]) for k, v in mg.model.module.named_parameters())
    assert mg.weights_version == 10
    _free(mg)


def test_checkpoint_resume_continues_the_loss_curve(qwen3_dir, tmp_path):
    samples = samples_for_test(4, seed=3)
    a = megatron(qwen3_dir, lr=1e-3, warmup_steps=3)
    losses_a = [a.train_sft(samples)["loss"] for _ in range(2)]
    a.save_checkpoint(tmp_path / "ckpt")
    losses_a += [a.train_sft(samples)["loss"] for _ in range(2)]
    _free(a)
    b = megatron(qwen3_dir, lr=1e-3, warmup_steps=3)
    b.load_checkpoint(tmp_path / "ckpt")
    assert b.weights_version == 2
    losses_b = [b.train_sft(samples)["loss"] for _ in range(2)]
    print("\nrun a", [round(x, 4) for x in losses_a], "resumed b", [round(x, 4) for x in losses_b])
    assert losses_a[2] < losses_a[0] - 0.05  # the curve moved, so matching it means something
    assert losses_b == pytest.approx(losses_a[2:], rel=2e-3)
    with pytest.raises(ValueError, match="not a trainer checkpoint"):
        b.load_checkpoint(tmp_path)
    _free(b)


def test_export_hf_loads_in_transformers_with_the_trainers_weights(qwen3_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    mg = megatron(qwen3_dir, lr=1e-3)
    samples = samples_for_test(4, seed=4)
    mg.train_sft(samples)
    synced = mg.state_dict_for_sync()
    folder = mg.export_hf(tmp_path / "hf")
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).state_dict()
    assert set(loaded) == set(synced), f"only synced {set(synced) - set(loaded)}, only exported {set(loaded) - set(synced)}"
    for k, v in synced.items():  # the same dtype too: torch.equal alone would compare an fp32 tensor as promoted
        h = loaded[k]
        diff = (h.float() - v.float()).abs().max().item() if h.shape == v.shape else float("nan")
        assert v.dtype == h.dtype and torch.equal(h, v), (
            f"{k}: synced {v.dtype} {tuple(v.shape)} vs exported {h.dtype} {tuple(h.shape)}, max |diff| {diff:.3g}")
    trained = TorchTrainBackend(TrainConfig(model_path=str(folder), dtype="bf16")).compute_logprobs(samples)
    d = _deltas(trained, mg.compute_logprobs(samples))
    assert d.mean() < 0.02, d.mean()
    _free(mg)


def varied_rewards(cfg, samples):
    """reward.reward_fn for the driver test: rewards that differ within every group, so GRPO has a gradient."""
    return [float(i % 2) for i in range(len(samples))]


def _tiny_rl_config(model: str, out: Path, **train):
    from smart.config import RLConfig

    cfg = RLConfig(model_path=model, out_dir=str(out), num_steps=1, save_every=1)
    cfg.data.problems, cfg.data.heldout_fraction = ["L1_1_ReLU"], 0.0
    cfg.rollout.max_new_tokens, cfg.rollout.n_samples_per_prompt, cfg.rollout.prompts_per_step = 16, 4, 1
    cfg.rollout.prompt_style, cfg.rollout.filter_fn = "zero_shot", ""
    cfg.reward.reward_fn = "tests.smart.test_megatron_gpu:varied_rewards"
    cfg.cluster.gpus_per_bundle, cfg.cluster.num_cpus = 1, 4
    cfg.backend, cfg.train = "megatron", MegatronTrainConfig(lr=1e-3, dtype="bf16", **train)
    return cfg


@pytest.fixture()
def local_ray():
    import ray

    from smart.tracking import ray_worker_env

    ray.init(num_cpus=4, num_gpus=torch.cuda.device_count(), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": ray_worker_env()})
    yield
    ray.shutdown()


def test_grpo_step_through_the_driver_and_engine_sync(tiny_model, tmp_path, local_ray):
    import ray
    from safetensors.torch import load_file

    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.ray.rollout_manager import RolloutManager
    from smart.rollout.engines import sync_weights
    from smart.train import train

    metrics = train(_tiny_rl_config(tiny_model, tmp_path / "run"))
    assert metrics["train/step"] == 1.0 and metrics["train/weights_version"] == 1.0, metrics
    assert (tmp_path / "run" / "hf" / "config.json").is_file()

    cfg = _tiny_rl_config(tiny_model, tmp_path / "sync")
    placement = make_placement(cfg.cluster)
    actor = TrainGroup.for_run(cfg, placement.actor)
    manager = RolloutManager.remote(cfg, placement.rollout)
    try:
        samples, _ = ray.get(manager.rollout.remote(0))  # rewarded: train_step's advantages need rewards
        actor.train_step(samples)
        assert sync_weights(actor, manager) == 1 and ray.get(manager.weights_versions.remote()) == [1]
        trainer_sd = ray.get(actor.weights_ref())
        engine_sd = ray.get(manager.engine_state_dict.remote())
        assert set(engine_sd) >= set(trainer_sd)
        assert all(torch.equal(engine_sd[k].cpu(), trainer_sd[k].to(engine_sd[k].dtype)) for k in trainer_sd)
        initial = load_file(str(Path(tiny_model) / "model.safetensors"))
        assert any(not torch.equal(initial[k].to(v.dtype), v) for k, v in trainer_sd.items())
    finally:
        ray.get(manager.shutdown.remote())
        ray.kill(manager)
        actor.shutdown()
        ray.util.remove_placement_group(placement.pg)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpus_tp2_pp2_cp2_dp2_match_tp1(qwen3_dir, local_ray):
    import ray

    from smart.config import ClusterConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement

    samples = samples_for_test(8, seed=5)
    results = {}
    for name, (workers, layout) in {"tp1": (1, {}), "tp2": (2, {"tp": 2}), "pp2": (2, {"pp": 2}),
                                    "cp2": (2, {"cp": 2}), "dp2": (2, {})}.items():
        cluster = ClusterConfig(actor_ranks=workers, gpus_per_bundle=1, num_cpus=4, colocate=False)
        placement = make_placement(cluster, need_rollout=False)
        cfg = MegatronTrainConfig(model_path=qwen3_dir, dtype="bf16", lr=1e-4, micro_batch_tokens=300, **layout)
        group = TrainGroup("megatron", cfg, placement.actor)
        try:
            lp = group.compute_logprobs(samples)
            step = group.train_sft(samples)
            results[name] = (lp, step)
        finally:
            group.shutdown()
            ray.util.remove_placement_group(placement.pg)
    for name in ("tp2", "pp2", "cp2", "dp2"):
        d = _deltas(results[name][0], results["tp1"][0])
        print(f"\n{name} vs tp1 logprobs: max {d.max():.4f} mean {d.mean():.5f}; loss "
              f"{results[name][1]['loss']:.5f} vs {results['tp1'][1]['loss']:.5f}, grad_norm "
              f"{results[name][1]['grad_norm']:.5f} vs {results['tp1'][1]['grad_norm']:.5f}")
        assert d.mean() < 0.02 and d.max() < 0.2
        assert results[name][1]["loss"] == pytest.approx(results["tp1"][1]["loss"], rel=0.02)
        assert results[name][1]["grad_norm"] == pytest.approx(results["tp1"][1]["grad_norm"], rel=0.05)
