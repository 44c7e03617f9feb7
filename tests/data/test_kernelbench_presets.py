"""KernelBench's server_type names map to OpenAI-compatible endpoints with their API-key variables."""

import pytest

from kbencheval.bench.common import make_llm_client
from kbencheval.llm import LLMError, make_client
from kbencheval.llm.http import OpenAIClient
from kbencheval.llm.presets import PRESETS

KEYS = {"together": "TOGETHER_API_KEY", "deepseek": "DEEPSEEK_API_KEY", "fireworks": "FIREWORKS_API_KEY",
        "anthropic": "ANTHROPIC_API_KEY", "google": "GEMINI_API_KEY"}


@pytest.fixture
def no_keys(monkeypatch):
    for preset in PRESETS.values():
        for env in preset.key_envs:
            monkeypatch.delenv(env, raising=False)
    return monkeypatch


@pytest.mark.parametrize("server_type", sorted(KEYS))
def test_hosted_preset_names_its_missing_key_then_uses_it(no_keys, server_type):
    with pytest.raises(LLMError, match=rf"server_type={server_type} needs an API key: set \${KEYS[server_type]}"):
        make_client(server_type, "some-model")
    no_keys.setenv(KEYS[server_type], "sk-test")
    client = make_client(server_type, "some-model")
    try:
        assert isinstance(client, OpenAIClient)
        assert client.base_url == PRESETS[server_type].base_url
        assert client.headers["Authorization"] == "Bearer sk-test"
    finally:
        client.close()


def test_litellm_key_names_are_read_too(no_keys):
    no_keys.setenv("FIREWORKS_AI_API_KEY", "fw")
    client = make_client("fireworks", "m")
    assert client.headers["Authorization"] == "Bearer fw"
    client.close()


def test_local_needs_no_key_and_takes_base_url(no_keys):
    client = make_llm_client("local", "default", base_url="http://127.0.0.1:10210")
    assert client.base_url == "http://127.0.0.1:10210/v1"
    client.close()


def test_api_key_env_overrides_the_preset_variable(no_keys):
    with pytest.raises(LLMError, match=r"set \$MY_DS_KEY"):
        make_llm_client("deepseek", "deepseek-chat", api_key_env="MY_DS_KEY")
    no_keys.setenv("MY_DS_KEY", "k")
    make_llm_client("deepseek", "deepseek-chat", api_key_env="MY_DS_KEY").close()


def test_unknown_server_type_lists_the_presets():
    with pytest.raises(ValueError, match="together, deepseek, fireworks, anthropic, google, local"):
        make_client("vllm", "m")
