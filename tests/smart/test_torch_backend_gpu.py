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


def test_fused_adamw_takes_the_same_step_as_foreach(model_dir):  # noqa: F811
    samples = _samples(4)
    weights = {}
    for fused in (True, False):
        b = TorchTrainBackend(TrainConfig(model_path=model_dir, lr=1e-3, fused_optimizer=fused))
        assert b.optimizer.defaults["fused"] is (True if fused else None)
        for _ in range(3):
            b.train_sft(samples)
        weights[fused] = _params(b)
    for name, value in weights[True].items():
        torch.testing.assert_close(value, weights[False][name], rtol=1e-4, atol=1e-5, msg=name)
