"""Generation clients: OpenAI-compatible HTTP, SGLang native HTTP, and an embedded HF engine.

    from kbencheval.llm import make_client, SamplingParams
    client = make_client("openai", "my-model", base_url="http://127.0.0.1:30000/v1")
    completions = client.chat([[{"role": "user", "content": "hi"}]], SamplingParams(n=2))

Heavy dependencies (torch, transformers) load only when a client that needs them is built.
"""

from kbencheval.llm.base import Completion, LLMClient, LLMError, SamplingParams, make_client

__all__ = ["Completion", "LLMClient", "LLMError", "SamplingParams", "make_client"]
