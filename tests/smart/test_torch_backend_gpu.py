"""TorchTrainBackend on one GPU: bf16 compute, fp32 master weights.

    pytest -m gpu tests/smart/test_torch_backend_gpu.py"""

import pytest
import torch

from smart.backends.torch import TorchTrainBackend, TrainConfig
from tests.smart.test_torch_backend import _params, _samples, model_dir  # noqa: F401

pytestmark = pytest.mark.gpu


def test_bf16_autocast_trains_with_fp32_master_weights(model_dir):  # noqa: F811
    b = TorchTrainBackend(TrainConfig(model_path=model_dir, lr=1e-2, gradient_checkpointing=True))
    assert b.device.type == "cuda" and b.compute_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in b.model.parameters())
    samples = _samples(4)
    before = _params(b)
    losses = [b.train_sft(samples)["loss"] for _ in range(6)]
    assert losses[-1] < losses[0] - 0.1, losses
    assert all(not torch.equal(v, before[k]) for k, v in _params(b).items())
    # bf16 logprobs stay close to an fp32 forward of the same weights
    lp = b.compute_logprobs(samples)
    s = samples[0]
    ids = torch.tensor([s.prompt_token_ids + s.response_token_ids], device=b.device)
    with torch.no_grad():
        ref = torch.log_softmax(b.model(input_ids=ids).logits[0].float(), -1)
    p = len(s.prompt_token_ids)
    expected = [ref[p - 1 + j, t].item() for j, t in enumerate(s.response_token_ids)]
    assert lp[0] == pytest.approx(expected, abs=0.05)
    m = b.train_grpo(samples, [1.0, -1.0, 0.5, -0.5], b.compute_logprobs(samples))
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert all(t.device.type == "cpu" for t in b.state_dict_for_sync(torch.bfloat16).values())


def test_fused_adamw_takes_the_same_steps_as_foreach(model_dir):  # noqa: F811
    """The same weights and data through both optimizers. The first version of this test (bf16, sdpa, each
    parameter within 1e-5 after three steps) failed on an H100 on 2026-12-08 at the embedding. Most likely cause,
    not yet checked on a GPU: the embedding's backward accumulates with atomics on CUDA, so two runs' gradients
    differ, and Adam scales a near-zero gradient's difference up to lr. Here fp32, eager attention and
    deterministic kernels make the first step's gradients bitwise equal, so after it each weight must match to
    about two fp32 ulps. After three steps the updates must match to 1e-3 of their norm: on CPU, beta2 0.99 instead
    of 0.999 moves them 1.6e-3 apart and beta1 0.8 5.6e-2, and the margin leaves room for a rare sign flip of a
    gradient near zero."""
    samples = _samples(4)
    start, first, third = {}, {}, {}
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for fused in (True, False):
            b = TorchTrainBackend(TrainConfig(model_path=model_dir, lr=1e-3, dtype="fp32", attn_implementation="eager",
                                              fused_optimizer=fused))
            assert b.optimizer.defaults["fused"] is (True if fused else None)
            start[fused] = _params(b)
            b.train_sft(samples)
            first[fused] = _params(b)
            for _ in range(2):
                b.train_sft(samples)
            third[fused] = _params(b)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    for name, weights in start[True].items():
        assert torch.equal(weights, start[False][name]), name
        # within about two fp32 ulps of the weight: the two kernels may round the last add differently
        torch.testing.assert_close(first[True][name], first[False][name], rtol=3e-7, atol=1e-9,
                                   msg=lambda mismatch, name=name: f"{name}: {mismatch}")
        update = {fused: third[fused][name] - weights for fused in (True, False)}
        gap = ((update[True] - update[False]).norm() / update[False].norm().clamp_min(1e-30)).item()
        assert gap < 1e-3, f"{name}: three-step updates {gap:.2e} of their norm apart"
    assert max((first[True][n] - start[True][n]).abs().max().item() for n in start[True]) > 1e-4  # it stepped
