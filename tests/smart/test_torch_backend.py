"""TorchTrainBackend on a tiny random Qwen3 (CPU, fp32).   pytest tests/smart/test_torch_backend.py"""

import json
import random

import pytest
import torch

from smart.backends.torch.backend import decoder_layers
from smart.backends.torch import (
    ModelPathError,
    TorchTrainBackend,
    TrainConfig,
    build_micro_batch,
    pack_micro_batches,
)
from smart.sample import Sample, SampleStatus

VOCAB = 128


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        head_dim=16,
    )
    path = tmp_path_factory.mktemp("tiny_qwen3")
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    return str(path)


def _samples(n=4, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r = rng.randint(2, 6), rng.randint(3, 9)
        mask = [1] * r
        if i % 2:  # a multi-turn-like sample: environment tokens in the middle are not trained
            mask[1:3] = [0, 0]
        out.append(
            Sample(
                index=i,
                group_index=i // 2,
                prompt_token_ids=[rng.randrange(VOCAB) for _ in range(p)],
                response_token_ids=[rng.randrange(VOCAB) for _ in range(r)],
                loss_mask=mask,
                rollout_logprobs=[0.0] * r,
                status=SampleStatus.COMPLETED,
            )
        )
    return out


def _backend(model_dir, **kw):
    kw.setdefault("lr", 1e-3)
    kw.setdefault("device", "cpu")  # fp32 CPU numerics even on a GPU machine (GPU: test_torch_backend_gpu.py)
    return TorchTrainBackend(TrainConfig(model_path=model_dir, **kw))


def _params(backend):
    return {k: v.detach().clone() for k, v in backend.model.named_parameters()}


def test_missing_model_path_is_one_clear_error(tmp_path):
    with pytest.raises(ModelPathError, match="model_path .* does not exist"):
        TorchTrainBackend(TrainConfig(model_path=str(tmp_path / "nope")))
    with pytest.raises(ModelPathError, match="model_path is empty"):
        TorchTrainBackend(TrainConfig())


def test_pack_micro_batches_respects_budget_and_covers_all():
    lengths = [5, 1, 9, 3, 3, 20, 2]
    batches = pack_micro_batches(lengths, budget=10)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert len(b) * longest <= 10 or len(b) == 1  # an over-long row travels alone
    assert [5] in batches


def test_micro_batch_masks_line_up_with_response_tokens():
    s = _samples(2)
    mb = build_micro_batch(s)
    for row, sample in enumerate(s):
        p, r = len(sample.prompt_token_ids), len(sample.response_token_ids)
        # shifted position p-1+j predicts response token j
        assert mb.target_ids_BT[row, p - 1 : p - 1 + r].tolist() == sample.response_token_ids
        assert mb.loss_mask_BT[row, p - 1 : p - 1 + r].tolist() == sample.loss_mask
        assert mb.response_mask_BT[row].sum().item() == r
        assert mb.loss_mask_BT[row].sum().item() == sum(sample.loss_mask)


def test_compute_logprobs_matches_direct_forward(model_dir):
    backend = _backend(model_dir, micro_batch_tokens=64)  # several rows per micro-batch: padding in play
    samples = _samples(5, seed=3)
    got = backend.compute_logprobs(samples)
    for s, lp in zip(samples, got):
        ids = torch.tensor([s.prompt_token_ids + s.response_token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(backend.model(input_ids=ids).logits[0].double(), -1)
        p = len(s.prompt_token_ids)
        expected = [logp[p - 1 + j, t].item() for j, t in enumerate(s.response_token_ids)]
        assert len(lp) == len(s.response_token_ids)
        assert lp == pytest.approx(expected, abs=1e-5)


def test_sft_loss_decreases_and_params_change(model_dir):
    backend = _backend(model_dir, lr=1e-2)
    before = _params(backend)
    samples = _samples(4)
    losses = [backend.train_sft(samples)["loss"] for _ in range(6)]
    assert losses[-1] < losses[0] - 0.1, losses
    assert backend.weights_version == 6
    changed = [k for k, v in _params(backend).items() if not torch.equal(v, before[k])]
    assert len(changed) == len(before)  # every tensor got a gradient


def test_sft_metrics(model_dir):
    backend = _backend(model_dir, micro_batch_tokens=16)
    samples = _samples(4)
    m = backend.train_sft(samples)
    assert m["tokens"] == sum(s.total_len for s in samples)
    assert m["trained_tokens"] == sum(sum(s.loss_mask) for s in samples)
    assert m["micro_batches"] > 1
    assert m["grad_norm"] > 0 and m["tokens_per_s"] > 0 and m["lr"] == pytest.approx(1e-3)


def test_grpo_step_runs_and_changes_params(model_dir):
    backend = _backend(model_dir, lr=1e-2)
    samples = _samples(4)
    old = backend.compute_logprobs(samples)
    before = _params(backend)
    m = backend.train_grpo(samples, [1.0, -1.0, 0.5, -0.5], old)
    # on-policy first step: ratio is exactly 1, nothing clipped
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert m["clip_frac"] == 0.0
    for key in ("loss", "pg_loss", "entropy", "grad_norm", "lr", "tokens", "tokens_per_s"):
        assert key in m
    assert any(not torch.equal(v, before[k]) for k, v in _params(backend).items())
    # off-policy now: the same old logprobs give ratios != 1
    m2 = backend.train_grpo(samples, [1.0, -1.0, 0.5, -0.5], old)
    assert m2["ratio_mean"] != pytest.approx(1.0, abs=1e-6)


def test_failed_samples_are_not_trained_on(model_dir):
    backend = _backend(model_dir)
    samples = _samples(3)
    samples[1].status = SampleStatus.FAILED
    m = backend.train_grpo(samples, [1.0, 5.0, -1.0], [[0.0] * len(s.response_token_ids) for s in samples])
    assert m["trained_tokens"] == sum(sum(s.loss_mask) for i, s in enumerate(samples) if i != 1)
    samples = _samples(1)
    samples[0].status = SampleStatus.FAILED
    with pytest.raises(ValueError, match="none of the 1 samples is trainable"):
        backend.train_sft(samples)


@pytest.mark.parametrize("mode", ["sft", "grpo_token_mean", "grpo_seq_mean"])
def test_accumulation_invariant(model_dir, mode):
    """One micro-batch of 4 and four micro-batches of 1 give the same gradient and loss.
    (Parameters are not compared: Adam's first step is ~lr * sign(grad), which amplifies
    float-rounding differences in near-zero gradients.)"""
    samples = _samples(4, seed=7)  # different lengths and mask counts: a naive per-micro-batch mean differs
    adv = [0.9, -0.3, 1.7, -1.2]
    agg = mode.removeprefix("grpo_") if mode.startswith("grpo") else "token_mean"
    results = []
    for budget in (10_000, 1):
        b = _backend(model_dir, micro_batch_tokens=budget, grad_clip=0.0)
        b.cfg.grpo.loss_agg = agg
        old = [[lp - 0.05 * (j % 3) for j, lp in enumerate(row)] for row in b.compute_logprobs(samples)]
        m = b.train_sft(samples) if mode == "sft" else b.train_grpo(samples, adv, old)
        grads = {k: p.grad.clone() for k, p in b.model.named_parameters()}
        results.append((m, grads))
    (m1, g1), (m4, g4) = results
    assert m1["micro_batches"] == 1 and m4["micro_batches"] == 4
    assert m1["loss"] == pytest.approx(m4["loss"], rel=1e-5, abs=1e-7)
    assert m1["grad_norm"] == pytest.approx(m4["grad_norm"], rel=1e-4)
    for k in g1:
        torch.testing.assert_close(g1[k], g4[k], rtol=1e-4, atol=1e-6)


def test_checkpoint_round_trip_resumes_exactly(model_dir, tmp_path):
    samples = _samples(4)
    a = _backend(model_dir, warmup_steps=5)
    a.train_sft(samples)
    a.train_sft(samples)
    a.save_checkpoint(tmp_path / "ckpt")

    b = _backend(model_dir, warmup_steps=5)
    b.load_checkpoint(tmp_path / "ckpt")
    assert b.step == a.step == 2 and b.weights_version == 2
    pa, pb = _params(a), _params(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    # same optimizer moments and LR schedule: the next step is identical
    ma, mb = a.train_sft(samples), b.train_sft(samples)
    assert ma["lr"] == mb["lr"] == pytest.approx(1e-3 * 3 / 5)
    pa, pb = _params(a), _params(b)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)

    with pytest.raises(ValueError, match="not a trainer checkpoint"):
        b.load_checkpoint(tmp_path / "missing")


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_lr_warms_up_decays_to_its_floor_and_resumes_on_schedule(model_dir, tmp_path, schedule):
    cfg = dict(warmup_steps=2, lr_schedule=schedule, lr_decay_steps=6, min_lr_ratio=0.1)
    # by hand: warm-up 1/2, 2/2; then progress p = (step - 2) / 4 decays 1 -> 0.1, and stays at the floor
    shape = (lambda p: 1 - p) if schedule == "linear" else (lambda p: 0.5 * (1 + torch.cos(torch.tensor(p * torch.pi)).item()))
    want = [0.5, 1.0] + [0.1 + 0.9 * shape(p) for p in (0.0, 0.25, 0.5, 0.75)] + [0.1, 0.1]
    samples = _samples(2)
    a = _backend(model_dir, **cfg)
    got = [a.train_sft(samples)["lr"] for _ in range(4)]
    a.save_checkpoint(tmp_path / "ckpt")
    b = _backend(model_dir, **cfg)
    b.load_checkpoint(tmp_path / "ckpt")
    got += [b.train_sft(samples)["lr"] for _ in range(4)]
    assert got == pytest.approx([1e-3 * f for f in want])
    from kbencheval.config import ConfigError
    with pytest.raises(ConfigError, match="lr_decay_steps"):
        TrainConfig(model_path=model_dir, lr_schedule=schedule).validate()


def test_state_dict_for_sync_is_a_cpu_copy_with_hf_names(model_dir):
    b = _backend(model_dir)
    sd = b.state_dict_for_sync()
    assert set(sd) == set(b.model.state_dict())
    assert "model.embed_tokens.weight" in sd
    assert all(t.device.type == "cpu" for t in sd.values())
    sd["model.embed_tokens.weight"].zero_()  # must not write through to the trainer
    assert b.model.state_dict()["model.embed_tokens.weight"].abs().sum() > 0
    v0 = b.weights_version
    b.train_sft(_samples(2))
    assert b.weights_version == v0 + 1
    fresh = b.state_dict_for_sync()
    assert all(torch.equal(fresh[k], v) for k, v in b.model.state_dict().items())


def test_export_hf_reloads_to_the_same_model(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    b = _backend(model_dir, lr=1e-2)
    b.train_sft(_samples(4))
    out = b.export_hf(tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, b.model(input_ids=ids).logits)


def test_reference_model_stays_frozen(model_dir):
    b = _backend(model_dir, lr=1e-2, use_ref_model=True)
    b.cfg.grpo.kl_coef = 0.1
    samples = _samples(4)
    initial = b.compute_logprobs(samples)
    m = b.train_grpo(samples, [1.0, -1.0, 1.0, -1.0], initial)
    assert m["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference during the first step
    ref_after = b.compute_logprobs(samples, use_ref=True)
    now = b.compute_logprobs(samples)
    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    assert flat(ref_after) == pytest.approx(flat(initial), abs=1e-6)
    assert flat(now) != pytest.approx(flat(initial), abs=1e-4)
    m = b.train_grpo(samples, [1.0, -1.0, 1.0, -1.0], now)
    assert m["kl"] > 0


def test_use_ref_without_reference_is_an_error(model_dir):
    with pytest.raises(ValueError, match="use_ref_model"):
        _backend(model_dir).compute_logprobs(_samples(1), use_ref=True)


@pytest.mark.slow  # compiling two layers on a 2-core CPU takes about 30 s
def test_compiled_layers_score_and_train_like_eager_ones(model_dir):
    results = {}
    for compiled in (False, True):
        b = TorchTrainBackend(TrainConfig(model_path=model_dir, lr=1e-3, compile_layers=compiled))
        layers = decoder_layers(b.model)
        assert len(layers) == 2 and all((layer._compiled_call_impl is not None) == compiled for layer in layers)
        samples = _samples(4)
        logprobs = b.compute_logprobs(samples)
        b.train_sft(samples)
        b.train_grpo(samples, [1.0, -1.0, 0.5, -0.5], b.compute_logprobs(samples))
        results[compiled] = (logprobs, _params(b))
    eager, compiled = results[False], results[True]
    for row_eager, row_compiled in zip(eager[0], compiled[0]):
        assert row_compiled == pytest.approx(row_eager, abs=1e-5)
    for name, value in eager[1].items():
        torch.testing.assert_close(compiled[1][name], value, rtol=1e-4, atol=1e-5, msg=name)
