"""GRPO in the torch backend on a tiny random Qwen3 (CPU, fp32): mini-batches make the PPO ratio and
clipping act, truncated importance sampling, the engine/trainer mismatch, temperature-consistent
logprobs, chunking, checkpoints without optimizer.   pytest tests/smart/test_grpo_backend.py"""

import math

import pytest
import torch

from smart.backends.torch import TorchTrainBackend, TrainConfig
from smart.sample import Sample, SampleStatus
from tests.smart.test_torch_backend import _backend, _params, _samples, model_dir  # noqa: F401

ADV = [1.0, -1.0, 0.5, -0.5]


def _masked_mean(rows, samples, fn):
    vals = [fn(v, j, s) for s, row in zip(samples, rows) for j, (v, m) in enumerate(zip(row, s.loss_mask)) if m]
    return sum(vals) / len(vals)


def test_two_mini_batches_move_the_ratio_and_clip(model_dir):  # noqa: F811
    samples = _samples(4, seed=5)
    kw = dict(lr=5e-2, grad_clip=0.0)
    a = _backend(model_dir, **kw)
    a.cfg.grpo.num_steps_per_rollout = 2
    a.cfg.grpo.eps_clip = a.cfg.grpo.eps_clip_high = 0.01
    m = a.train_grpo(samples, ADV)
    assert m["optimizer_steps"] == 2 and a.step == 2

    # The same two steps by hand: old logprobs once, step on the first half, then the second half's ratio.
    b = _backend(model_dir, **kw)
    b.cfg.grpo.eps_clip = b.cfg.grpo.eps_clip_high = 0.01
    old = b.compute_logprobs(samples)
    first = b.train_grpo(samples[:2], ADV[:2], old[:2])
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and first["clip_frac"] == 0.0
    now = b.compute_logprobs(samples[2:])
    half = samples[2:]
    ratio = _masked_mean(now, half, lambda v, j, s: math.exp(v - old[samples.index(s)][j]))
    adv_of = {id(s): a_ for s, a_ in zip(half, ADV[2:])}

    def clipped(v, j, s):
        r, adv = math.exp(v - old[samples.index(s)][j]), adv_of[id(s)]
        return float(-adv * min(max(r, 0.99), 1.01) > -adv * r)

    clip = _masked_mean(now, half, clipped)
    assert ratio != pytest.approx(1.0, abs=1e-3) and clip > 0  # the second step is off-policy
    assert m["ratio_mean_last"] == pytest.approx(ratio, rel=1e-5)
    assert m["clip_frac_last"] == pytest.approx(clip)
    assert m["ratio_mean"] == pytest.approx((1.0 + ratio) / 2, rel=1e-5)
    pa, pb = _params(a), _params(b)
    b.train_grpo(samples[2:], ADV[2:], old[2:])
    pb = _params(b)
    assert all(torch.allclose(pa[k], pb[k], atol=1e-6) for k in pa)  # same two optimizer steps


def test_one_step_a_rollout_skips_the_old_logprob_pass_and_updates_the_same(model_dir, monkeypatch):  # noqa: F811
    # on-policy (one optimizer step a rollout) the update's own forward gives the old logprobs: no second pass,
    # ratio exactly 1, and the same update as with old logprobs computed beforehand
    samples = _samples(4, seed=7)
    kw = dict(lr=5e-2, grad_clip=0.0)
    with_pass, skipped = _backend(model_dir, **kw), _backend(model_dir, **kw)
    want = with_pass.train_grpo(samples, ADV, with_pass.compute_logprobs(samples))
    monkeypatch.setattr(skipped, "compute_logprobs", lambda *a, **k: pytest.fail("a separate old-logprob pass ran"))
    got = skipped.train_grpo(samples, ADV)
    assert got["ratio_mean"] == 1.0 and got["clip_frac"] == 0.0 and "logprobs_s" not in got
    assert got["pg_loss"] == pytest.approx(want["pg_loss"], rel=1e-5)
    pa, pb, start = _params(with_pass), _params(skipped), _params(_backend(model_dir, **kw))
    assert any(not torch.equal(pa[k], start[k]) for k in pa)  # the step moved the weights
    assert all(torch.allclose(pa[k], pb[k], atol=1e-6) for k in pa)


def _with_rollout_logprobs(backend, samples, shift):
    exact = backend.compute_logprobs(samples)
    for s, row in zip(samples, exact):
        s.rollout_logprobs = [lp - shift if m else 0.0 for lp, m in zip(row, s.loss_mask)]
    return samples


def test_mismatch_and_tis_weights_by_hand(model_dir):  # noqa: F811
    b = _backend(model_dir, lr=0.0)  # lr 0: weights never move, every step is on-policy
    b.cfg.grpo.log_entropy = False
    samples = _with_rollout_logprobs(b, _samples(4), shift=math.log(1.5))  # trainer - engine = ln 1.5
    plain = b.train_grpo(samples, ADV)
    assert plain["logprob_mismatch_mean"] == pytest.approx(math.log(1.5), abs=1e-5)
    assert plain["logprob_mismatch_max"] == pytest.approx(math.log(1.5), abs=1e-5)
    b.cfg.grpo.tis_clip = 2.0
    tis = b.train_grpo(samples, ADV)
    assert tis["tis_mean"] == pytest.approx(1.5, rel=1e-5) and tis["tis_clip_frac"] == 0.0
    assert tis["pg_loss"] == pytest.approx(1.5 * plain["pg_loss"], rel=1e-5)  # every token weighs 1.5
    b.cfg.grpo.tis_clip = 1.2
    capped = b.train_grpo(samples, ADV)
    assert capped["tis_mean"] == pytest.approx(1.2, rel=1e-6) and capped["tis_clip_frac"] == pytest.approx(1.0)
    assert capped["pg_loss"] == pytest.approx(1.2 * plain["pg_loss"], rel=1e-5)


def test_rollout_logprobs_as_old_logprobs(model_dir):  # noqa: F811
    b = _backend(model_dir, lr=0.0)
    b.cfg.grpo.use_rollout_logprobs = True
    samples = _with_rollout_logprobs(b, _samples(4), shift=0.1)
    m = b.train_grpo(samples, ADV)
    assert m["ratio_mean"] == pytest.approx(math.exp(0.1), rel=1e-5)  # trainer / engine
    assert m["logprob_mismatch_mean"] == pytest.approx(0.1, abs=1e-5)
    samples[0].rollout_logprobs = []
    with pytest.raises(ValueError, match="rollout_logprobs"):
        b.train_grpo(samples, ADV)


def test_temperature_scaled_logprobs_equal_the_engine_at_0_7(tiny_model):
    from kbencheval.llm.base import SamplingParams
    from kbencheval.llm.embedded import EmbeddedEngine

    engine = EmbeddedEngine(tiny_model, device="cpu")
    prompts = [engine.encode_chat([{"role": "user", "content": q}]) for q in ("relu kernel", "add two tensors")]
    completions = engine.generate_ids(prompts, SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=12, seed=3))
    samples = [Sample(index=i, prompt_token_ids=p, response_token_ids=c.token_ids, loss_mask=[1] * len(c.token_ids),
                      rollout_logprobs=c.logprobs, status=SampleStatus.COMPLETED)
               for i, (p, c) in enumerate(zip(prompts, completions))]
    cfg = TrainConfig(model_path=tiny_model, device="cpu", micro_batch_tokens=64)
    cfg.grpo.temperature = 0.7
    trainer = TorchTrainBackend(cfg)
    got = trainer.compute_logprobs(samples)
    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    assert flat(got) == pytest.approx(flat(c.logprobs for c in completions), abs=1e-4)
    cfg.grpo.temperature = 1.0  # the old, T = 1 scoring is off by far more than float noise
    assert max(abs(a - b) for a, b in zip(flat(trainer.compute_logprobs(samples)), flat(got))) > 1e-2


def test_chunked_backend_equals_one_chunk(model_dir):  # noqa: F811
    samples = _samples(4, seed=7)
    grads = []
    for chunk in (3, 100_000):
        b = _backend(model_dir, logit_chunk_tokens=chunk, grad_clip=0.0)
        old = [[lp - 0.05 * (j % 3) for j, lp in enumerate(row)] for row in b.compute_logprobs(samples)]
        m = b.train_grpo(samples, ADV, old)
        grads.append(({k: p.grad.clone() for k, p in b.model.named_parameters()}, m, old))
    (g1, m1, o1), (g2, m2, o2) = grads
    assert all(x == pytest.approx(y, abs=1e-5) for x, y in zip(o1, o2))
    assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-5) and m1["entropy"] == pytest.approx(m2["entropy"], rel=1e-5)
    for k in g1:
        torch.testing.assert_close(g1[k], g2[k], rtol=1e-4, atol=1e-6)


def test_checkpoint_without_optimizer_restores_weights_and_rng(model_dir, tmp_path):  # noqa: F811
    a = _backend(model_dir, save_optimizer=False)
    a.train_sft(_samples(4))
    a.save_checkpoint(tmp_path / "ckpt")
    expected_draw = torch.rand(3)
    b = _backend(model_dir, save_optimizer=False)
    torch.manual_seed(1234)
    b.load_checkpoint(tmp_path / "ckpt")
    assert b.step == 1
    pa, pb = _params(a), _params(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not b.optimizer.state  # fresh Adam moments
    assert any(st["exp_avg"].any() for st in a.optimizer.state.values())
    assert torch.equal(torch.rand(3), expected_draw)  # the RNG continues where the checkpoint left it


def test_optimizer_from_starts_with_the_checkpoints_adam_moments_and_this_runs_lr(model_dir, tmp_path):  # noqa: F811
    sft = _backend(model_dir, lr=1e-2, adam_beta2=0.95, warmup_steps=0)
    sft.train_sft(_samples(4))
    sft.train_sft(_samples(4, seed=3))
    sft.save_checkpoint(tmp_path / "sft")
    rl = _backend(model_dir, lr=1e-5, warmup_steps=4, optimizer_from=str(tmp_path / "sft"))
    assert rl.step == 0 and len(rl.optimizer.state) == len(sft.optimizer.state)
    by_name = dict(zip([n for n, _ in sft.model.named_parameters()], sft.optimizer.state.values()))
    for (name, p) in rl.model.named_parameters():
        st = rl.optimizer.state[p]
        torch.testing.assert_close(st["exp_avg_sq"], by_name[name]["exp_avg_sq"])
        assert float(st["step"]) == 2.0  # bias correction as mature as the SFT run's
    group = rl.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.999) and group["initial_lr"] == 1e-5
    assert group["lr"] == pytest.approx(1e-5 / 4)  # this run's warm-up, not the checkpoint's schedule
    fresh = _backend(model_dir, lr=1e-5, warmup_steps=4)
    moved = [_params(rl), _params(fresh)]
    rl.train_grpo(_samples(4, seed=5), ADV)
    fresh.train_grpo(_samples(4, seed=5), ADV)
    step_from_sft = sum((p - moved[0][k]).abs().sum().item() for k, p in _params(rl).items())
    step_fresh = sum((p - moved[1][k]).abs().sum().item() for k, p in _params(fresh).items())
    assert step_from_sft < step_fresh  # SFT's larger second moments damp the first steps


def test_optimizer_from_says_what_to_pass_when_the_folder_has_no_moments(model_dir, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="not a trainer checkpoint"):
        _backend(model_dir, optimizer_from=str(tmp_path))
    bare = _backend(model_dir, save_optimizer=False)
    bare.train_sft(_samples(4))
    bare.save_checkpoint(tmp_path / "bare")
    with pytest.raises(ValueError, match="save_optimizer=false"):
        _backend(model_dir, optimizer_from=str(tmp_path / "bare"))


def test_optimizer_from_a_missing_folder_is_a_config_error():
    from kbencheval.config import ConfigError

    with pytest.raises(ConfigError, match="train.optimizer_from=/no/such/run is not a folder"):
        TrainConfig(model_path="m", optimizer_from="/no/such/run").validate()
