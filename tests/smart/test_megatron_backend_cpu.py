"""MegatronTrainBackend equals TorchTrainBackend step for step (fp32, CPU, gloo) under TP, CP and DP.

    pytest -q -m slow tests/smart/test_megatron_backend_cpu.py

Each case runs tests/smart/megatron_backend_cpu_worker.py on WORLD processes: the torch backend in one
plain process beside the Megatron backend's ranks, same tiny Qwen3, same samples (6 of them, in
several micro-batches). Checked: response logprobs; three SFT steps' losses and gradient norms;
every parameter's gradient after the first step; one GRPO step (train_step); the weights after
those four Adam steps, gathered to HF names; a dist_checkpointing save + load continuing the same
two losses (the second one needs the restored Adam state), with and without the distributed optimizer.
Megatron's hard-coded CUDA calls are pointed at the CPU inside the worker (see its docstring).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[megatron]')")

from tests.support import ENV, REPO, free_port  # noqa: E402

WORKER = REPO / "tests" / "smart" / "megatron_backend_cpu_worker.py"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("qwen3-untied")
    Qwen3ForCausalLM(Qwen3Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                 tie_word_embeddings=False)).save_pretrained(path)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("world,tp,cp,distopt", [(1, 1, 1, 0), (2, 2, 1, 0), (2, 1, 2, 0), (2, 1, 1, 0), (2, 1, 1, 1)],
                         ids=["one", "tp2", "cp2", "dp2", "dp2-distopt"])
def test_megatron_backend_matches_torch_backend(model_dir, tmp_path, world, tp, cp, distopt):
    out, port = tmp_path / "found.json", free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), model_dir, str(out), str(r), str(world), str(port), str(tp),
                               str(cp), str(distopt)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-4000:] for log in logs)
    found = json.loads(out.read_text())
    torch_lp, megatron_lp = found["logprobs"]
    assert max(abs(a - b) for x, y in zip(torch_lp, megatron_lp) for a, b in zip(x, y)) < 1e-5
    for loss_t, loss_m, norm_t, norm_m in found["sft"]:
        assert loss_m == pytest.approx(loss_t, rel=1e-5) and norm_m == pytest.approx(norm_t, rel=1e-5)
    assert found["grad_mismatches"] == []
    for key, (value_t, value_m) in found["grpo"].items():
        assert value_m == pytest.approx(value_t, rel=1e-5, abs=1e-6), key
    assert found["weight_keys_equal"] and found["weights_max_delta"] < 1e-4
    step, losses_continued, losses_resumed = found["resume"]
    assert step == 4 and losses_resumed == pytest.approx(losses_continued, rel=1e-6)
