"""smart: SLIME-style SFT and GRPO training of kernel-writing LLMs, driven by Ray."""

__version__ = "0.1.0"
