"""Losses and advantages against hand-computed numbers.   pytest tests/smart/test_algo.py"""

import math

import pytest
import torch

from smart.algo import (
    aggregate,
    discounted_returns,
    entropy_from_logits,
    group_advantages,
    grpo_loss,
    sft_loss,
    token_logprobs,
)

LN = math.log


def _logits_from_probs(*rows):
    # logits = log(unnormalised weights): softmax gives weights / sum(weights)
    return torch.log(torch.tensor([rows], dtype=torch.float64))


def test_token_logprobs_and_entropy_by_hand():
    logits = _logits_from_probs([1.0, 2.0, 3.0], [1.0, 1.0, 2.0])  # probs [1/6,1/3,1/2], [1/4,1/4,1/2]
    lp = token_logprobs(logits, torch.tensor([[2, 0]]))
    assert lp.dtype == logits.dtype == torch.float64  # never below its input's precision
    assert token_logprobs(logits.bfloat16(), torch.tensor([[2, 0]])).dtype == torch.float32  # bf16 scored in fp32
    assert lp[0, 0].item() == pytest.approx(LN(1 / 2), abs=1e-6)
    assert lp[0, 1].item() == pytest.approx(LN(1 / 4), abs=1e-6)
    h = entropy_from_logits(logits)
    h0 = -(1 / 6 * LN(1 / 6) + 1 / 3 * LN(1 / 3) + 1 / 2 * LN(1 / 2))
    h1 = -(2 * 1 / 4 * LN(1 / 4) + 1 / 2 * LN(1 / 2))
    assert h[0].tolist() == pytest.approx([h0, h1], abs=1e-6)


def test_sft_loss_counts_only_masked_tokens():
    logits = _logits_from_probs([1.0, 2.0, 3.0], [1.0, 1.0, 2.0])
    targets = torch.tensor([[2, 0]])
    only_first = sft_loss(logits, targets, torch.tensor([[1, 0]]))
    assert only_first.item() == pytest.approx(-LN(1 / 2), abs=1e-6)
    both = sft_loss(logits, targets, torch.tensor([[1, 1]]))
    assert both.item() == pytest.approx((-LN(1 / 2) - LN(1 / 4)) / 2, abs=1e-6)


def test_sft_loss_mean_is_over_tokens_of_the_whole_batch():
    # seq 0 has 1 assistant token, seq 1 has 3: token mean weighs each token equally
    logits = _logits_from_probs([1.0, 1.0], [1.0, 1.0], [1.0, 1.0]).repeat(2, 1, 1)
    logits[0, 0] = torch.log(torch.tensor([1.0, 3.0], dtype=torch.float64))  # p(target=1) = 3/4
    targets = torch.ones(2, 3, dtype=torch.long)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    expected = (-LN(3 / 4) - 3 * LN(1 / 2)) / 4
    assert sft_loss(logits, targets, mask).item() == pytest.approx(expected, abs=1e-6)


def test_group_advantages_by_hand():
    r = torch.tensor([1.0, 0.0, 2.0, 2.0])
    adv = group_advantages(r, group_size=2, normalize_std=False)
    assert adv.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    adv = group_advantages(r, group_size=2, normalize_std=True, eps=1e-6)
    # group 1: mean 0.5, population std 0.5; group 2: all equal -> 0
    assert adv.tolist() == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.0, 0.0])
    adv = group_advantages(torch.tensor([0.0, 1.0, 2.0, 3.0]), group_size=4, normalize_std=True, eps=0.0)
    std = math.sqrt((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 4)
    assert adv.tolist() == pytest.approx([-1.5 / std, -0.5 / std, 0.5 / std, 1.5 / std], abs=1e-6)


def test_positive_only_advantages_leave_worse_samples_alone():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(r, group_size=4, normalize_std=False, positive_only=True)
    assert adv.tolist() == pytest.approx([0.75, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    adv = group_advantages(r, group_size=4, normalize_std=True, positive_only=True)
    assert adv.tolist() == pytest.approx([0.75 / math.sqrt(3 / 16), 0, 0, 0, 0, 0, 0, 0], rel=1e-4)


def test_group_advantages_rejects_broken_groups():
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), group_size=3, normalize_std=False)


def test_discounted_returns_by_hand():
    assert discounted_returns([1.0, 0.0, 2.0], gamma=0.5) == pytest.approx([1.0 + 0.5 * 1.0, 0.0 + 0.5 * 2.0, 2.0])
    assert discounted_returns([0.3, 0.4], gamma=1.0) == pytest.approx([0.7, 0.4])
    assert discounted_returns([0.3, 0.4], gamma=0.0) == pytest.approx([0.3, 0.4])
    assert discounted_returns([], gamma=0.9) == []


def _one_token(ratio: float, adv: float, **kw):
    old = torch.tensor([[LN(0.4)]], dtype=torch.float64)
    logp = (old + LN(ratio)).clone().requires_grad_(True)
    loss, m = grpo_loss(logp, old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 1), **kw)
    loss.backward()
    return loss.item(), logp.grad.item(), m


@pytest.mark.parametrize(
    "ratio,adv,expected_loss,clipped",
    [
        (1.5, +1.0, -1.28, True),  # positive advantage: capped at 1 + eps_clip_high, no gradient
        (1.5, -1.0, +1.5, False),  # negative advantage: a growing bad token is never clipped
        (0.5, +1.0, -0.5, False),  # positive advantage, shrinking: never clipped
        (0.5, -1.0, +0.8, True),  # negative advantage: floored at 1 - eps_clip
        (1.25, +1.0, -1.25, False),  # inside the clip-higher band: still learning
    ],
)
def test_grpo_clip_higher(ratio, adv, expected_loss, clipped):
    loss, grad, m = _one_token(ratio, adv, eps_clip=0.2, eps_clip_high=0.28)
    assert loss == pytest.approx(expected_loss, abs=1e-9)
    assert m["clip_frac"] == (1.0 if clipped else 0.0)
    assert m["ratio_mean"] == pytest.approx(ratio)
    # d(-A * r)/d logp = -A * r where unclipped; 0 where clipped
    assert grad == pytest.approx(0.0 if clipped else -adv * ratio, abs=1e-9)


def test_symmetric_clip_caps_what_clip_higher_lets_through():
    loss, grad, m = _one_token(1.25, +1.0, eps_clip=0.2, eps_clip_high=0.2)
    assert loss == pytest.approx(-1.2)
    assert grad == 0.0 and m["clip_frac"] == 1.0


@pytest.mark.parametrize("kl_type", ["k1", "k3"])
def test_grpo_kl_by_hand(kl_type):
    logp = torch.tensor([[LN(0.5)]], dtype=torch.float64)
    ref = torch.tensor([[LN(0.25)]], dtype=torch.float64)
    # ref - logp = ln(1/2)
    expected_kl = LN(2) if kl_type == "k1" else 0.5 - LN(0.5) - 1
    loss, m = grpo_loss(
        logp, logp, torch.zeros(1), torch.ones(1, 1), ref_logprobs_BT=ref, kl_coef=0.1, kl_type=kl_type
    )
    assert m["kl"] == pytest.approx(expected_kl)
    assert loss.item() == pytest.approx(0.1 * expected_kl)  # advantage 0: only the KL term is left


def test_grpo_entropy_bonus_is_subtracted():
    logp = torch.zeros(1, 2, dtype=torch.float64)
    ent = torch.tensor([[2.0, 4.0]], dtype=torch.float64)
    loss, m = grpo_loss(logp, logp, torch.zeros(1), torch.tensor([[1, 0]]), entropy_BT=ent, entropy_coef=0.01)
    assert m["entropy"] == pytest.approx(2.0)  # masked position ignored
    assert loss.item() == pytest.approx(-0.02)


def test_grpo_token_mean_vs_seq_mean_by_hand():
    # ratio 1 everywhere, so each masked token's loss is -A of its sequence
    logp = torch.zeros(2, 4, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])
    tok, _ = grpo_loss(logp, logp, adv, mask, loss_agg="token_mean")
    seq, _ = grpo_loss(logp, logp, adv, mask, loss_agg="seq_mean")
    assert tok.item() == pytest.approx((-1.0 + 3 * 1.0) / 4)
    assert seq.item() == pytest.approx((-1.0 + 1.0) / 2)


def test_token_mean_equals_seq_mean_for_one_sequence():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(1, 7, generator=g, dtype=torch.float64) * 0.1 - 1
    old = torch.randn(1, 7, generator=g, dtype=torch.float64) * 0.1 - 1
    ref = torch.randn(1, 7, generator=g, dtype=torch.float64) * 0.1 - 1
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 1]])
    kw = dict(ref_logprobs_BT=ref, kl_coef=0.05)
    tok, mt = grpo_loss(logp, old, torch.tensor([0.7]), mask, loss_agg="token_mean", **kw)
    seq, ms = grpo_loss(logp, old, torch.tensor([0.7]), mask, loss_agg="seq_mean", **kw)
    assert tok.item() == pytest.approx(seq.item(), abs=1e-12)
    assert mt == pytest.approx(ms)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean"])
def test_denom_makes_micro_batches_add_up(loss_agg):
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(4, 5, generator=g, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.2, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    full, full_m = grpo_loss(logp, old, adv, mask, loss_agg=loss_agg)
    denom = mask.sum().item() if loss_agg == "token_mean" else 4
    parts = [grpo_loss(logp[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], loss_agg=loss_agg, denom=denom) for i in range(4)]
    assert sum(p[0].item() for p in parts) == pytest.approx(full.item(), abs=1e-12)
    assert sum(p[1]["pg_loss"] for p in parts) == pytest.approx(full_m["pg_loss"], abs=1e-12)


def test_aggregate_rejects_unknown_mode():
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "sum")


def test_grpo_needs_ref_for_kl():
    z = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="use_ref_model"):
        grpo_loss(z, z, torch.zeros(1), torch.ones(1, 1), kl_coef=0.1)


def test_masked_positions_cannot_poison_the_gradient():
    # environment / padding positions may carry any old logprob; -inf there must not give NaN
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.0, -float("inf")]], dtype=torch.float64)
    loss, m = grpo_loss(logp, old, torch.tensor([1.0]), torch.tensor([[1, 0]]), ref_logprobs_BT=old)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 1].item() == 0.0
    assert math.isfinite(m["kl"])
