"""Which `pip install "tritonforge[EXTRA]"` brings a package that the core install leaves out.

The core install is the evaluator and its CLIs; the rest is imported only where it is used, so a
missing extra surfaces as a ModuleNotFoundError deep in a command. The CLIs turn it into one line.
"""

from __future__ import annotations

# top-level module -> the extra that installs it (pyproject.toml's [project.optional-dependencies])
EXTRA_OF = {
    "transformers": "llm", "tokenizers": "llm", "safetensors": "llm", "huggingface_hub": "llm",
    "ray": "train", "tensorboard": "train",
    "datasets": "data", "pyarrow": "data", "faiss": "data", "sentence_transformers": "data",
    "wandb": "wandb",
    "megatron": "megatron", "mbridge": "megatron", "einops": "megatron",
    "sglang_router": "sglang",
}


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """One line naming the install that fixes `error`, or None when no extra provides the module."""
    top = (error.name or "").split(".")[0]
    if top not in EXTRA_OF:
        return None
    return f"this needs {top}, which the core install leaves out: pip install \"tritonforge[{EXTRA_OF[top]}]\""
