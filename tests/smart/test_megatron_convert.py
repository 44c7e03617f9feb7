"""HF -> Megatron (mbridge, local spec) -> HF on CPU, for TP=1 and TP=2 shards over gloo; config plumbing.

    pytest -q tests/smart/test_megatron_convert.py

Each case starts WORLD processes of tests/smart/megatron_convert_worker.py (one per TP rank). Bit-exact
means torch.equal on fp32 tensors; "strict" means every Megatron parameter was written by the load
(the worker fills them with NaN first). The forward on the shards is compared with the HF model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[megatron]')")
pytest.importorskip("mbridge", reason="mbridge not installed (pip install -e '.[megatron]')")

from tests.support import ENV, REPO, free_port  # noqa: E402

WORKER = REPO / "tests" / "smart" / "megatron_convert_worker.py"


def _save(config, out: Path) -> str:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    with torch.no_grad():  # HF initialises norms to 1: random values catch a swapped norm mapping
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    shape = dict(vocab_size=1000, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128)
    root = tmp_path_factory.mktemp("megatron-families")
    return {
        "qwen3_tied": _save(Qwen3Config(**shape, head_dim=16, tie_word_embeddings=True), root / "qwen3"),
        "qwen2_untied_bias": _save(Qwen2Config(**shape, tie_word_embeddings=False), root / "qwen2"),
        "llama_untied": _save(LlamaConfig(**shape, tie_word_embeddings=False), root / "llama"),
    }


def _run_ranks(model_dir: str, world: int, tmp_path: Path, layout: str = "tp", dtype: str = "fp32") -> dict:
    out, port = tmp_path / f"{layout}{world}{dtype}.json", free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), model_dir, str(out), str(r), str(world), str(port), layout,
                               dtype],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    return json.loads(out.read_text())


def _hf_logprobs_entropy(model_dir: str, ids: list) -> tuple[torch.Tensor, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    from smart.algo import entropy_from_logits, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids_BT = torch.tensor(ids)
    with torch.no_grad():
        logits = model(ids_BT).logits
        return token_logprobs(logits[:, :-1], ids_BT[:, 1:]), entropy_from_logits(logits)


def _assert_matches_hf(model_dir: str, found: dict) -> None:
    logprobs, entropy = _hf_logprobs_entropy(model_dir, found["ids"])
    d_lp = (torch.tensor(found["logprobs"]) - logprobs).abs().max().item()
    d_h = (torch.tensor(found["entropy"]) - entropy).abs().max().item()
    assert d_lp < 1e-4 and d_h < 1e-4, f"max |delta| vs the HF model: logprobs {d_lp}, entropy {d_h}"


@pytest.mark.parametrize("family,world", [
    ("qwen3_tied", 1), ("qwen3_tied", 2),
    pytest.param("qwen2_untied_bias", 2, marks=pytest.mark.slow), pytest.param("llama_untied", 1, marks=pytest.mark.slow),
])
def test_hf_megatron_hf_round_trip(families, family, world, tmp_path):
    found = _run_ranks(families[family], world, tmp_path)
    assert found["unloaded"] == [], f"Megatron parameters the HF load never wrote: {found['unloaded']}"
    assert found["missing"] == [] and found["extra"] == [], (found["missing"], found["extra"])
    assert found["mismatched"] == [], f"not bit-exact after the round trip: {found['mismatched']}"
    shards = found["shards"]
    # Rank 0's shard layout: QKV and gate/up split by output rows, o_proj/down_proj by input columns,
    # the vocabulary (padded to 128 * world) by rows; norms replicated.
    heads, groups, head_dim, hidden, ffn = 4, 2, 16, 64, 96
    assert shards["decoder.layers.0.self_attention.linear_qkv.weight"] == [(heads + 2 * groups) * head_dim // world, hidden]
    assert shards["decoder.layers.0.self_attention.linear_proj.weight"] == [hidden, heads * head_dim // world]
    assert shards["decoder.layers.0.mlp.linear_fc1.weight"] == [2 * ffn // world, hidden]
    assert shards["decoder.layers.0.mlp.linear_fc2.weight"] == [hidden, ffn // world]
    assert shards["embedding.word_embeddings.weight"] == [-(-1000 // (128 * world)) * 128 * world // world, hidden]
    assert shards["decoder.layers.0.input_layernorm.weight"] == [hidden]
    assert ("output_layer.weight" in shards) == (family != "qwen3_tied")
    # The shards compute the HF model's token logprobs and entropy (vocab-parallel, padded vocab masked).
    _assert_matches_hf(families[family], found)


def test_context_parallel_two_ranks_match_hf(families, tmp_path):
    """CP=2 without TE: chunks r and 2cp-1-r per rank, K/V all-gathered; logprobs as one process."""
    found = _run_ranks(families["qwen3_tied"], 2, tmp_path, layout="cp")
    assert found["unloaded"] == [] and found["mismatched"] == []
    _assert_matches_hf(families["qwen3_tied"], found)


def test_bf16_model_holds_and_exports_only_bf16_weights(families, tmp_path):
    """Norms included: the local spec's torch norms come out fp32 unless build_model casts them, and then
    state_dict_for_sync gave fp32 norms while export_hf wrote them as bf16 (bridge.py note 7)."""
    found = _run_ranks(families["qwen3_tied"], 1, tmp_path, dtype="bf16")
    assert found["dtypes"] == ["torch.bfloat16"]
    assert found["unloaded"] == [] and found["missing"] == [] and found["extra"] == []
    assert found["mismatched"] == [], f"not the HF weights cast to bf16, in bf16: {found['mismatched']}"


def test_tied_bridge_does_not_leak_into_untied(families):
    """mbridge's Qwen2Bridge writes the tied alias into a class-level dict; ours keeps it per bridge."""
    from mbridge.core.parallel_states import ParallelStates

    from smart.backends.megatron.bridge import make_bridge

    make_bridge(families["qwen3_tied"], torch.float32, ParallelStates(), use_cpu_initialization=True)
    untied = make_bridge(families["qwen2_untied_bias"], torch.float32, ParallelStates(), use_cpu_initialization=True)
    assert untied._weight_name_mapping_mcore_to_hf("output_layer.weight") == ["lm_head.weight"]
    assert untied._weight_name_mapping_mcore_to_hf("decoder.layers.1.pre_mlp_layernorm.weight") == [
        "model.layers.1.post_attention_layernorm.weight"]


def test_run_config_selects_megatron(tiny_model):
    from smart.config import ConfigError, RLConfig, load_config

    from smart.backends.megatron.config import MegatronTrainConfig

    cfg = load_config(RLConfig, str(REPO / "configs" / "rl_small_megatron_gpu.yaml"),
                      [f"model_path={tiny_model}", "train.tp=2", "train.lr=3e-6"])
    assert cfg.backend == "megatron" and isinstance(cfg.train, MegatronTrainConfig)
    assert (cfg.train.tp, cfg.train.lr) == (2, 3e-6)
    with pytest.raises(ConfigError, match="train.tp/pp/cp must be >= 1"):
        load_config(RLConfig, str(REPO / "configs" / "rl_small_megatron_gpu.yaml"), ["train.pp=0"])
    with pytest.raises(ConfigError, match="do not split into tp\\*pp\\*cp"):
        cfg.train.validate(world_size=3)
    with pytest.raises(ConfigError, match="put backend: in the YAML file"):  # a megatron train: section under backend=torch
        load_config(RLConfig, str(REPO / "configs" / "rl_small_megatron_gpu.yaml"), ["backend=torch"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error")
def test_megatron_backend_on_cpu_names_the_fix(tiny_model):
    from smart.backends import backend_class
    from smart.backends.megatron.config import MegatronTrainConfig

    with pytest.raises(ValueError, match="needs a CUDA GPU.*backend=torch"):
        backend_class("megatron")(MegatronTrainConfig(model_path=tiny_model))


def test_qwen3_8b_recipe_loads_with_the_published_settings():
    from smart.config import RLConfig, load_config

    cfg = load_config(RLConfig, str(REPO / "configs" / "rl_qwen3_8b_megatron.yaml"), [])
    m, g = cfg.train, cfg.train.grpo
    assert (cfg.backend, m.tp, m.cp, cfg.cluster.actor_ranks, cfg.cluster.rollout_num_engines) == (
        "megatron", 2, 2, 4, 2)
    assert (cfg.rollout.max_turns, cfg.rollout.gamma, cfg.train.lr, g.eps_clip, g.eps_clip_high) == (3, 0.4, 1e-6, 0.2, 0.28)
    assert not cfg.cluster.colocate
    m.validate(world_size=cfg.cluster.actor_ranks)
