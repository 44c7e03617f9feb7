"""Training backends. Each lives in its own folder and imports its heavy dependencies only there.

- `smart.backends.torch`: the embedded default, a Hugging Face causal LM (FSDP2 across GPUs).
- `smart.backends.megatron`: design note for the Megatron-core backend (not implemented).

A backend takes `Sample`s and exposes compute_logprobs / train_sft / train_grpo /
state_dict_for_sync / save_checkpoint / load_checkpoint / export_hf; see TorchTrainBackend.
"""
