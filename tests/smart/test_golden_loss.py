"""Golden per-step losses on a tiny fixed model: any change to the numerics of the SFT or GRPO path
(masking, shifting, loss aggregation, optimizer, logprobs) moves these numbers.   pytest tests/smart/test_golden_loss.py

The values were recorded once on CPU (fp32) from this exact setup; a deliberate change to the
numerics must re-record them and say why in its commit.
"""

from __future__ import annotations

import random

import pytest
import torch

from smart.sample import Sample, SampleStatus

VOCAB = 96
# Recorded with torch 2.13 CPU, transformers 5 (see the module docstring).
GOLDEN_SFT = [4.5622282, 4.1647348, 3.8726840]
# At ratio 1 the GRPO loss is -sum(A * mask) / tokens; grad_norm, entropy and the logprobs after the
# update carry the numerics of the policy-gradient path.
GOLDEN_GRPO = {"loss": 0.1406250, "grad_norm": 1.1871347, "entropy": 4.4965315}
GOLDEN_LOGPROB_AFTER = -3.6920193
TOL = dict(rel=1e-4, abs=1e-6)  # float reduction order across CPU thread counts, nothing more


def _model_dir(tmp_path) -> str:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1234)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, head_dim=16)
    Qwen3ForCausalLM(cfg).save_pretrained(tmp_path)
    return str(tmp_path)


def _samples() -> list[Sample]:
    rng = random.Random(7)
    out = []
    for i in range(4):
        p, r = 3 + i, 6 + 2 * i
        mask = [1] * r
        if i % 2:
            mask[2:4] = [0, 0]  # environment tokens inside a multi-turn response: not trained
        out.append(Sample(index=i, group_index=i // 2, prompt_token_ids=[rng.randrange(VOCAB) for _ in range(p)],
                          response_token_ids=[rng.randrange(VOCAB) for _ in range(r)], loss_mask=mask,
                          rollout_logprobs=[-4.5] * r, status=SampleStatus.COMPLETED))
    return out


@pytest.fixture()
def backend(tmp_path):
    from smart.backends.torch import TorchTrainBackend, TrainConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one reduction order
    try:
        yield TorchTrainBackend(TrainConfig(model_path=_model_dir(tmp_path), lr=1e-2, device="cpu", dtype="fp32", seed=0))
    finally:
        torch.set_num_threads(threads)


def test_golden_sft_then_grpo_losses(backend):
    samples = _samples()
    sft = [backend.train_sft(samples)["loss"] for _ in GOLDEN_SFT]
    grpo = backend.train_step(samples, [1.0, -0.5, 0.25, -1.0])
    after = [lp for s, row in zip(samples, backend.compute_logprobs(samples)) for lp, m in zip(row, s.loss_mask) if m]
    logprob_after = sum(after) / len(after)
    print("sft", [f"{x:.7f}" for x in sft], "grpo", {k: f"{grpo[k]:.7f}" for k in GOLDEN_GRPO}, f"{logprob_after:.7f}")
    assert sft == pytest.approx(GOLDEN_SFT, **TOL)
    assert {k: grpo[k] for k in GOLDEN_GRPO} == pytest.approx(GOLDEN_GRPO, **TOL)
    assert logprob_after == pytest.approx(GOLDEN_LOGPROB_AFTER, **TOL)
    assert sft[0] > sft[-1]  # and it is learning, not just repeating itself
