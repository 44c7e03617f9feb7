"""KernelBench's `server_type` names, as OpenAI-compatible endpoints with the usual API-key variables.

    kbench generate run_name=ds server_type=deepseek model_name=deepseek-chat        # needs $DEEPSEEK_API_KEY
    kbench run-one server_type=local base_url=http://127.0.0.1:30000 model_name=default

KernelBench reads TOGETHER_API_KEY, DEEPSEEK_API_KEY, FIREWORKS_API_KEY (FIREWORKS_AI_API_KEY through
LiteLLM), ANTHROPIC_API_KEY, GEMINI_API_KEY and, for a local server, SGLANG_API_KEY; the first variable
listed for a preset is the one an error names. Anthropic and Google serve the OpenAI chat-completions
route themselves, so one client speaks to every preset.
"""

from __future__ import annotations

import dataclasses
import os

from kbencheval.llm.base import LLMError


@dataclasses.dataclass(frozen=True)
class Preset:
    base_url: str
    key_envs: tuple[str, ...]
    """Environment variables that may hold the key, in the order they are read."""
    key_required: bool = True


PRESETS = {
    "together": Preset("https://api.together.xyz/v1", ("TOGETHER_API_KEY", "TOGETHERAI_API_KEY")),
    "deepseek": Preset("https://api.deepseek.com/v1", ("DEEPSEEK_API_KEY",)),
    "fireworks": Preset("https://api.fireworks.ai/inference/v1", ("FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY")),
    "anthropic": Preset("https://api.anthropic.com/v1", ("ANTHROPIC_API_KEY",)),
    "google": Preset("https://generativelanguage.googleapis.com/v1beta/openai", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
    # SGLang, vLLM or `kbench serve` on this machine; they ignore the key unless started with one
    "local": Preset("http://127.0.0.1:30000/v1", ("SGLANG_API_KEY",), key_required=False),
}


def preset_client(server_type: str, model_name: str, base_url: str | None = None, *, api_key_env: str = "", **kw):
    """An OpenAIClient for a KernelBench preset; base_url and api_key_env override the preset's own."""
    from kbencheval.llm.http import OpenAIClient

    preset = PRESETS[server_type]
    envs = (api_key_env,) if api_key_env else preset.key_envs
    key = next((os.environ[e] for e in envs if os.environ.get(e)), "")
    if not key and preset.key_required:
        raise LLMError(f"server_type={server_type} needs an API key: set ${envs[0]}"
                       + (f" (or ${', $'.join(envs[1:])})" if len(envs) > 1 else ""))
    return OpenAIClient(model_name, base_url=base_url or preset.base_url, api_key=key or "EMPTY", **kw)
