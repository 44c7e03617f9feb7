"""smart (training): losses and GRPO, the torch and Megatron backends, engines and weight sync, reward,
rollout, plugins, tracking, and the inference stack (kbencheval.llm) that rollouts drive."""
