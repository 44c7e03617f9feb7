"""Megatron-core backend: design note only. Nothing here is implemented; importing it gives no trainer.

The plan, so the interfaces in smart.backends.torch stay fit for it:
- Same surface as TorchTrainBackend: compute_logprobs(samples, use_ref), train_sft(samples),
  train_grpo(samples, advantages, old_logprobs), state_dict_for_sync(), weights_version,
  save_checkpoint / load_checkpoint / export_hf. The Ray layer should depend only on these.
- Inputs stay `Sample`s. Each DP rank takes its token-balanced shard the way TorchTrainBackend._plan
  does. Micro-batches are packed with THD sequence packing (cu_seqlens) instead of right padding.
- Losses come from smart.algo unchanged. Under TP, token_logprobs needs a vocab-parallel
  log-softmax (all-reduce of max and sum over the TP group) rather than gathering full logits.
  Global denominators (`denom=`) keep gradient accumulation and DP exact, as they do here.
- Weights out: HF <-> Megatron name and layout conversion (fused QKV split by head groups, gate/up
  split, TP shards gathered), then streamed to the engines in buckets, not as one dict.
- megatron-core is imported only inside this package (optional extra `tritonforge[megatron]`).
"""
