"""Megatron-core training backend (`backend: megatron`): TP/PP, data parallel, distributed optimizer.

    smart rl configs/rl_small_megatron_gpu.yaml            # needs `pip install -e '.[megatron]'`

Registered in smart.backends.BACKENDS: its `train:` section is config.MegatronTrainConfig and its
trainer backend.MegatronTrainBackend, with TorchTrainBackend's surface (train_step,
compute_logprobs, train_sft, train_grpo, state_dict_for_sync, weights_version, save_checkpoint,
load_checkpoint, export_hf), so the Ray layer and the drivers name neither. Hugging Face <->
Megatron conversion goes through mbridge (bridge.py lists what it lacks and what is patched
around); checkpoint.py says what dist_checkpointing needs around the distributed optimizer. This
file and config.py import no megatron-core, so reading a config needs none.
"""
