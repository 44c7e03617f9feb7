"""The model + optimizer state that MegatronTrainBackend saves through megatron.core.dist_checkpointing.

    dist_checkpointing.save(sharded_state(model, optimizer, loading=False), folder)
    prepare_optimizer_for_load(ddp_model, optimizer)
    state = dist_checkpointing.load(sharded_state(model, optimizer, loading=True), folder)
    model.load_state_dict(state["model"]); load_optimizer_state(optimizer, state["optimizer"])

What megatron-core (0.16 and 0.19 alike) needs around its distributed optimizer when the inner
optimizer is torch's Adam (no Transformer Engine, no apex, as on our GPU image):
1. Its default format (fully_sharded_model_space) builds flattened ShardedTensors, which
   dist_checkpointing rejects ("ShardedTensor.flattened_range is not supported"). dp_reshardable,
   Megatron-LM's own default and implemented identically in both versions, writes each rank's
   buffer shard as is (no gather); a resume may change DP but not TP/PP.
2. Its state_dict() reads Adam's per-parameter `step`, which a fresh optimizer does not have yet.
3. Its load leaves one `step` tensor shared by every parameter (torch's Adam would advance it once
   per parameter), and dp_reshardable then overwrites it with the step held before the load.
"""

from __future__ import annotations

import torch

_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}  # note 1; the other optimizers ignore it


def sharded_state(model, optimizer, loading: bool) -> dict:
    """model: the unwrapped GPTModel; optimizer: get_megatron_optimizer's."""
    model_sd = model.sharded_state_dict()
    return {"model": model_sd,
            "optimizer": optimizer.sharded_state_dict(model_sd, is_loading=loading, metadata=dict(_METADATA))}


def prepare_optimizer_for_load(ddp_model, optimizer) -> None:
    """One zero-gradient step allocates Adam's state (note 2); the load overwrites all it touches
    (weights, master weights, moments, step)."""
    ddp_model.zero_grad_buffer()
    optimizer.zero_grad()
    optimizer.step()


def load_optimizer_state(optimizer, state: dict) -> None:
    with torch.no_grad():  # dp_reshardable's load copies into the master weights, leaves that require grad
        optimizer.load_state_dict(state)
    _restore_adam_step(optimizer)


def _restore_adam_step(optimizer) -> None:
    """The checkpoint's step (in param_groups) back into every parameter's own Adam state (note 3).
    No-op where param_groups hold no step: the non-distributed optimizers keep and restore it in the state."""
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = opt.optimizer
        for group in inner.param_groups:
            if "step" not in group:
                continue
            for p in group["params"]:
                state = inner.state.get(p)
                if state and "step" in state:
                    state["step"] = torch.full_like(state["step"], float(group["step"]))
