"""GRPO pieces against hand-computed values: truncated importance sampling, chunked and
temperature-scaled logprobs.   pytest tests/smart/test_grpo_algo.py"""

import math

import pytest
import torch
import torch.nn.functional as F

from smart.algo import chunked_logprobs, entropy_from_logits, grpo_loss, place, token_logprobs

LN = math.log


def test_tis_weights_by_hand():
    # two tokens, ratio 1 (logp == old); old - rollout = ln 1.5 and ln 3 -> raw weights 1.5 and 3
    old = torch.tensor([[LN(0.3), LN(0.6)]], dtype=torch.float64)
    rollout = torch.tensor([[LN(0.2), LN(0.2)]], dtype=torch.float64)
    logp = old.clone().requires_grad_(True)
    adv = torch.tensor([2.0], dtype=torch.float64)
    loss, m = grpo_loss(logp, old, adv, torch.ones(1, 2), rollout_logprobs_BT=rollout, tis_clip=2.0)
    loss.backward()
    # weights min(1.5, 2) = 1.5 and min(3, 2) = 2; per token loss -A * r * w with r = 1
    assert loss.item() == pytest.approx((-2.0 * 1.5 - 2.0 * 2.0) / 2)
    assert m["tis_mean"] == pytest.approx((1.5 + 2.0) / 2)
    assert m["tis_clip_frac"] == pytest.approx(0.5)
    # d loss / d logp_t = -A * r * w / n: the weight is a constant, not a gradient path
    assert logp.grad[0].tolist() == pytest.approx([-2.0 * 1.5 / 2, -2.0 * 2.0 / 2])
    # without TIS the same tokens weigh 1
    plain, m0 = grpo_loss(old, old, adv, torch.ones(1, 2))
    assert plain.item() == pytest.approx(-2.0) and "tis_mean" not in m0


def test_tis_ignores_masked_positions_and_needs_rollout_logprobs():
    old = torch.tensor([[LN(0.5), -float("inf")]], dtype=torch.float64)
    rollout = torch.tensor([[LN(0.25), 0.0]], dtype=torch.float64)
    loss, m = grpo_loss(old, old, torch.tensor([1.0]), torch.tensor([[1, 0]]), rollout_logprobs_BT=rollout, tis_clip=5.0)
    assert loss.item() == pytest.approx(-2.0) and m["tis_mean"] == pytest.approx(2.0) and m["tis_clip_frac"] == 0.0
    with pytest.raises(ValueError, match="rollout engine's logprobs"):
        grpo_loss(old, old, torch.tensor([1.0]), torch.ones(1, 2), tis_clip=2.0)


def test_temperature_scaled_logprobs_by_hand():
    # one position, logits ln[1, 2, 4]; at T = 0.5 the probabilities are [1, 4, 16] / 21
    h = torch.eye(3, dtype=torch.float64)[:1]  # hidden = e0, so logits = W[:, 0]
    w = torch.log(torch.tensor([[1.0], [2.0], [4.0]], dtype=torch.float64)).expand(3, 3).contiguous()
    lp, ent = chunked_logprobs(h, w, torch.tensor([2]), temperature=0.5, with_entropy=True)
    assert lp.item() == pytest.approx(LN(16 / 21))
    p = [1 / 21, 4 / 21, 16 / 21]
    assert ent.item() == pytest.approx(-sum(x * LN(x) for x in p))
    assert chunked_logprobs(h, w, torch.tensor([2]))[0].item() == pytest.approx(LN(4 / 7))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        chunked_logprobs(h, w, torch.tensor([2]), temperature=0.0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_unchunked_with_gradients(temperature):
    g = torch.Generator().manual_seed(0)
    n, hdim, vocab = 11, 8, 50
    h = torch.randn(n, hdim, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(vocab, hdim, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, vocab, (n,), generator=g)
    coef = torch.randn(n, generator=g, dtype=torch.float64)

    z = F.linear(h, w) / temperature
    want_lp = token_logprobs(z[None], ids[None])[0]
    want_ent = entropy_from_logits(z[None])[0]
    ((want_lp * coef).sum() + want_ent.sum()).backward()
    want_gh, want_gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None

    lp, ent = chunked_logprobs(h, w, ids, temperature=temperature, chunk_tokens=4, with_entropy=True)
    ((lp * coef).sum() + ent.sum()).backward()
    # float64 in, float64 throughout: only the order of summation differs, so the tolerance is float64's
    # and holds on any CPU (a float32 round trip gave 3e-6 differences that depended on the processor).
    assert lp.dtype == ent.dtype == want_lp.dtype == torch.float64
    torch.testing.assert_close(lp, want_lp, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ent, want_ent, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h.grad, want_gh, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w.grad, want_gw, rtol=1e-10, atol=1e-12)
    # entropy is only computed when asked for
    assert chunked_logprobs(h, w, ids, chunk_tokens=4)[1] is None


def test_place_puts_values_back_row_major():
    mask = torch.tensor([[0, 1, 1], [1, 0, 0]])
    out = place(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert out.tolist() == [[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]
