"""The generation contract: `SamplingParams` in, `Completion`s out, through any `LLMClient`.

    client = make_client("sglang", "/models/qwen3-8b", base_url="http://127.0.0.1:30000")
    [[c0, c1]] = client.chat([messages], SamplingParams(n=2, temperature=1.0, seed=0))

A failed request comes back as `Completion(error=...)` so one bad sample never stops a run;
`LLMError` is raised only when the setup itself is unusable (no server, no key, no model).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

SERVER_TYPES = ("openai", "sglang", "embedded")


class LLMError(RuntimeError):
    """The generation setup is unusable; the message names the fix."""


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
    """Per generated token: log_softmax of the unmodified logits (temperature 1), at the sampled id."""
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
    or the HF folder / hub id ("embedded"). Extra keywords go to the client's constructor."""
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
    raise ValueError(f"unknown server_type '{server_type}'; choose one of {', '.join(SERVER_TYPES)}")
