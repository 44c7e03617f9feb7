"""Hugging Face <-> Megatron-core through mbridge, with Megatron's local layer spec (no Transformer Engine).

    bridge = make_bridge("runs/tiny-model", torch.bfloat16, ParallelStates(...) or None)
    model = build_model(bridge, device)            # this rank's GPTModel (its TP shard, its PP stage)
    bridge.load_weights([model], "runs/tiny-model") # HF safetensors -> Megatron shards
    for hf_name, tensor in bridge.export_weights([model]): ...   # full HF tensors, on every rank

mbridge (0.15.1) supplies the family configs (Qwen2/2.5, Qwen3 q/k norm, Llama), the fused-QKV and
gate/up layouts and the TP split/merge. What it lacks, and the least code around it here:
1. It hard-codes Transformer Engine's layer spec (`use_transformer_engine=True`; without TE:
   `NameError: TENorm`). TE has no wheel and is not on the GPU image, so `_get_transformer_layer_spec`
   always takes the local spec, with torch SDPA as core attention (attention.py, which also does CP).
2. Its name map knows only TE's fused layer norms (`linear_qkv.layer_norm_weight`,
   `linear_fc1.layer_norm_weight`); the local spec names them `input_layernorm.weight` and
   `pre_mlp_layernorm.weight`. `_LOCAL_NORM_ALIASES` renames them to the TE names before mbridge's map.
3. It reads `hf_config.rope_theta`; transformers 5 keeps it in `rope_parameters`. `_get_gptmodel_args`
   reads either (and maps Llama 3's rope scaling, which mbridge reads from the removed `rope_scaling`).
4. Qwen2Bridge writes the tied-embedding alias into its class-level name dict, so one tied model
   makes every later untied bridge in the process load lm_head from embed_tokens; each bridge here
   gets its own copy, and the alias applies to every family (mbridge's LlamaBridge has none).
5. It turns sequence parallel on for tp > 1, which the local spec's torch norms refuse; off here.
6. Its `get_model` calls `.cuda()` unconditionally; `build_model` calls the provider directly and
   moves the model where it is told (CPU in the conversion tests).
7. Megatron's (and mbridge's) get_model wraps the model in Float16Module, which casts it to bf16; the
   local spec's torch norms ignore params_dtype and stay fp32 without it. `build_model` casts every
   parameter to the bridge's dtype instead, so the weights trained, synced and exported are all bf16
   (fp32 norms synced as fp32 but exported as bf16 made export_hf differ from state_dict_for_sync,
   and the non-distributed bf16 optimizer's checkpoint lost track of them).
"""

from __future__ import annotations

from pathlib import Path

import torch

_LOCAL_NORM_ALIASES = {
    ".input_layernorm.weight": ".self_attention.linear_qkv.layer_norm_weight",
    ".pre_mlp_layernorm.weight": ".mlp.linear_fc1.layer_norm_weight",
}
SUPPORTED_FAMILIES = ("qwen2", "qwen3", "llama")


class _LocalSpecMixin:
    """Mixed in front of mbridge's family bridge (Qwen3Bridge, Qwen2Bridge, LLaMABridge)."""

    def _adjust_mapping_for_shared_weights(self):
        from mbridge.core.bridge import Bridge

        self._DIRECT_MAPPING = dict(Bridge._DIRECT_MAPPING)  # per instance, see note 4
        if getattr(self.hf_config, "tie_word_embeddings", False):
            self._DIRECT_MAPPING["output_layer.weight"] = "model.embed_tokens.weight"

    def _get_hf_shared_weight_keys(self):
        return ["model.embed_tokens.weight"] if getattr(self.hf_config, "tie_word_embeddings", False) else []

    def _get_transformer_layer_spec(self, vp_stage=None):
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

        from smart.backends.megatron.attention import SDPACoreAttention

        spec = get_gpt_layer_local_spec(qk_layernorm=self.config.qk_layernorm, normalization="RMSNorm")
        spec.submodules.self_attention.submodules.core_attention = SDPACoreAttention
        return spec

    def _weight_name_mapping_mcore_to_hf(self, mcore_weights_name: str) -> list[str]:
        for local, te in _LOCAL_NORM_ALIASES.items():
            if mcore_weights_name.endswith(local):
                mcore_weights_name = mcore_weights_name[: -len(local)] + te
        return super()._weight_name_mapping_mcore_to_hf(mcore_weights_name)

    def _get_gptmodel_args(self) -> dict:
        cfg = self.hf_config
        rope = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
        theta = getattr(cfg, "rope_theta", None) or rope.get("rope_theta")
        if theta is None:
            raise ValueError(f"{cfg.model_type} config has neither rope_theta nor rope_parameters['rope_theta']")
        args = dict(vocab_size=cfg.vocab_size, max_sequence_length=cfg.max_position_embeddings,
                    position_embedding_type="rope", rotary_base=float(theta))
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind == "llama3":
            # Megatron's llama3 scaling fixes low/high freq factors 1/4 and 8192 original positions (Llama 3.1's).
            args.update(rope_scaling=True, rope_scaling_factor=float(rope["factor"]))
        elif kind != "default":
            raise ValueError(f"rope_type {kind!r} is not supported by the megatron backend (default and llama3 are)")
        return args


def load_hf_config(model_path: str):
    from transformers import AutoConfig

    local = Path(model_path).expanduser()
    if not (local / "config.json").is_file():
        raise ValueError(f"model_path {model_path} has no config.json; the megatron backend needs a local HF folder "
                         "(python scripts/make_tiny_model.py --out DIR writes a tiny one)")
    cfg = AutoConfig.from_pretrained(str(local))
    if cfg.model_type not in SUPPORTED_FAMILIES:
        raise ValueError(f"model_type {cfg.model_type!r} is not supported by the megatron backend; "
                         f"use one of {', '.join(SUPPORTED_FAMILIES)} or backend=torch")
    return cfg


def make_bridge(model_path: str, dtype: torch.dtype, parallel_states=None, make_vocab_size_divisible_by: int = 1,
                **config_overrides):
    """An mbridge bridge for model_path's family, patched as the module docstring says.

    parallel_states=None reads megatron's parallel_state (initialised); pass mbridge's ParallelStates
    to build a config without a process group. config_overrides go to TransformerConfig.
    """
    from mbridge.core.bridge import _MODEL_REGISTRY

    hf_config = load_hf_config(model_path)
    family = _MODEL_REGISTRY[hf_config.model_type]
    cls = type(f"Local{family.__name__}", (_LocalSpecMixin, family), {})
    bridge = cls(hf_config, dtype=dtype, parallel_states=parallel_states,
                 make_vocab_size_divisible_by=make_vocab_size_divisible_by)
    # masked_softmax_fusion needs Megatron's compiled kernels (apex); SDPA does the masking itself.
    # mbridge turns sequence parallel on whenever tp > 1; the local spec's torch norms refuse it
    # (their gradients would need the TP all-reduce that TE's and apex's norms carry), so it stays off.
    config_overrides = {"masked_softmax_fusion": False, "sequence_parallel": False, **config_overrides}
    bridge.set_extra_args(**config_overrides)
    return bridge


def build_model(bridge, device: torch.device | str, pre_process: bool = True, post_process: bool = True):
    """This rank's GPTModel from the bridge's provider, on `device` (mbridge's get_model forces .cuda())."""
    from megatron.core import tensor_parallel

    model = bridge._model_provider([])(pre_process=pre_process, post_process=post_process)
    for param in model.parameters():
        tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(param)
    # The local spec's torch norms (torch.nn.RMSNorm) ignore params_dtype and come out fp32; Megatron's
    # get_model casts them in Float16Module, skipped here (note 7).
    return model.to(device=device, dtype=bridge.dtype)
