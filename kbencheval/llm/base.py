"""The generation contract: `SamplingParams` in, `Completion`s out, through any `LLMClient`.

    client = make_client("sglang", "/models/qwen3-8b", base_url="http://127.0.0.1:30000")
    [[c0, c1]] = client.chat([messages], SamplingParams(n=2, temperature=1.0, seed=0))

A failed request comes back as `Completion(error=...)` so one bad sample never stops a run;
`LLMError` is raised only when the setup itself is unusable (no server, no key, no model).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol, runtime_checkable

from kbencheval.config import ConfigError

SERVER_TYPES = ("openai", "sglang", "embedded")
# KernelBench's hosted and local presets, all OpenAI-compatible (kbencheval/llm/presets.py)
PRESET_SERVER_TYPES = ("together", "deepseek", "fireworks", "anthropic", "google", "local")


class LLMError(RuntimeError):
    """The generation setup is unusable; the message names the fix."""


def encode_chat(tokenizer, messages: list[dict]) -> list[int]:
    """Prompt token ids through the tokenizer's chat template, ready for the assistant's turn: the one
    encoding engines, clients and smart's rollouts share, so a prompt is tokenized the same everywhere."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class ModelPathError(LLMError, ConfigError):
    """A model path that can only be local and does not exist (a config error too, for smart's CLI)."""


def resolve_model_path(path: str, what: str = "model path") -> str:
    """The one local-folder-versus-hub-id rule (engines, clients and smart's trainer all use it).

    An existing folder is returned expanded. `org/name` and bare names such as `gpt2` are hub ids,
    returned unchanged. A path that can only be local (starts with / . ~, or has more than one /)
    and is missing raises ModelPathError with one line naming the fix.
    """
    if not path:
        raise ModelPathError(f"{what} is empty; pass a local HF folder or hub id")
    local = Path(path).expanduser()
    if local.exists():
        return str(local)
    if path.startswith((".", "/", "~")) or path.count("/") > 1:
        raise ModelPathError(f"{what} {path} does not exist; pass a local HF folder or hub id "
                             "(python scripts/make_tiny_model.py --out DIR writes a tiny local one)")
    return path


@dataclasses.dataclass
class SamplingParams:
    temperature: float = 0.7
    """0 means greedy decoding."""
    top_p: float = 0.95
    """Nucleus sampling mass, in (0, 1]."""
    max_new_tokens: int = 2048
    n: int = 1
    """Samples per prompt."""
    seed: int | None = None
    """Sample k of a prompt uses seed + k where the backend supports seeding."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n (samples per prompt) must be >= 1, got {self.n}")


@dataclasses.dataclass
class Completion:
    text: str
    token_ids: list[int] | None = None
    """Generated token ids (including a final eos), when the backend exposes them."""
    logprobs: list[float] | None = None
    """Per generated token: log_softmax(logits / temperature) at the sampled id (temperature 1 when
    greedy), before top-p, as SGLang reports by default."""
    prompt_token_ids: list[int] | None = None
    finish_reason: str = ""
    """"stop" (eos), "length" (max_new_tokens) or whatever the server reported."""
    error: str = ""
    """Non-empty means the request failed; callers record a format_error sample and go on."""

    @property
    def ok(self) -> bool:
        return not self.error


@runtime_checkable
class LLMClient(Protocol):
    def chat(self, messages_batch: list[list[dict]], params: SamplingParams) -> list[list[Completion]]:
        """One list of `params.n` completions per conversation, in input order."""
        ...

    def close(self) -> None: ...


def make_client(server_type: str, model_name: str, base_url: str | None = None, **kw) -> LLMClient:
    """Build a client. `model_name` is the served model id ("openai"), the tokenizer path ("sglang")
    or the HF folder / hub id ("embedded"); a KernelBench preset name (together, deepseek, ...) is an
    OpenAI-compatible endpoint with its API-key variable. Extra keywords go to the client's constructor."""
    if server_type == "openai":
        from kbencheval.llm.http import OpenAIClient

        return OpenAIClient(model_name, base_url=base_url, **kw)
    if server_type == "sglang":
        from kbencheval.llm.http import SGLangClient

        return SGLangClient(model_name, base_url=base_url, **kw)
    if server_type == "embedded":
        if base_url:
            raise ValueError("server_type=embedded runs in-process; drop base_url or use server_type=openai|sglang")
        from kbencheval.llm.embedded import EmbeddedEngine

        return EmbeddedEngine(model_name, **kw)
    if server_type in PRESET_SERVER_TYPES:
        from kbencheval.llm.presets import preset_client

        return preset_client(server_type, model_name, base_url, **kw)
    raise ValueError(f"unknown server_type '{server_type}'; choose one of "
                     f"{', '.join(SERVER_TYPES + PRESET_SERVER_TYPES)}")
