"""python -m pytest tests/smart/test_llm.py -q

A real tiny Qwen3 (scripts/make_tiny_model.py) on CPU: the embedded engine's sampling, logprobs and
weight updates, then `kbench serve` as a subprocess driven by both HTTP clients.
"""

from pathlib import Path

import pytest
import requests
import torch

from kbencheval.llm import LLMError, SamplingParams, make_client
from kbencheval.llm.embedded import EmbeddedEngine
from tests.support import kbench_server

REPO = Path(__file__).resolve().parents[2]
CHATS = [
    [{"role": "user", "content": "def relu(x): return x"}],
    [{"role": "system", "content": "You write Triton kernels."},
     {"role": "user", "content": "class Model(nn.Module): a longer prompt so rows need left padding"}],
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Intra-op threads cost more than they save on a 64-wide model, badly so on a loaded CPU.
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="module")
def engine(tiny_model) -> EmbeddedEngine:
    return EmbeddedEngine(tiny_model, device="cpu")


def recomputed_logprobs(model, prompt_ids, token_ids, temperature: float = 1.0) -> torch.Tensor:
    """What a trainer computes: one unpadded forward over prompt + response, log_softmax(z / T) at each step."""
    seq = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(seq).logits[0].float() / (temperature or 1.0), dim=-1)
    return logp[len(prompt_ids) - 1:-1].gather(-1, torch.tensor(token_ids)[:, None])[:, 0]


# ---------------- embedded engine ----------------

def test_chat_shapes_and_seed_reproducibility(engine):
    params = SamplingParams(n=2, temperature=1.0, top_p=0.9, max_new_tokens=12, seed=5)
    first, again = engine.chat(CHATS, params), engine.chat(CHATS, params)
    assert [len(group) for group in first] == [2, 2]
    ids = [[c.token_ids for c in group] for group in first]
    assert ids == [[c.token_ids for c in group] for group in again]
    assert ids[0][0] != ids[0][1]  # samples of one prompt use different seeds
    other = engine.chat(CHATS, SamplingParams(n=2, temperature=1.0, top_p=0.9, max_new_tokens=12, seed=6))
    assert ids != [[c.token_ids for c in group] for group in other]
    # A prompt's samples do not depend on what else is in the batch.
    alone = engine.chat(CHATS[1:], params)
    assert [c.token_ids for c in alone[0]] == ids[1]
    for group in first:
        for c in group:
            assert c.ok and 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
            assert c.text == engine.tokenizer.decode(c.token_ids, skip_special_tokens=True)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.6, 0.8), (0.0, 1.0)])
def test_logprobs_match_a_recomputed_forward(engine, temperature, top_p):
    params = SamplingParams(n=2, temperature=temperature, top_p=top_p, max_new_tokens=16, seed=0)
    for group in engine.chat(CHATS, params):
        for c in group:
            assert engine.pad_id not in c.token_ids or engine.pad_id in engine.eos_ids
            want = recomputed_logprobs(engine.model, c.prompt_token_ids, c.token_ids, temperature)
            torch.testing.assert_close(torch.tensor(c.logprobs), want, atol=1e-4, rtol=1e-4)


def test_greedy_picks_the_argmax(engine):
    [c] = engine.generate_ids([engine.encode_chat(CHATS[0])], SamplingParams(temperature=0, max_new_tokens=6))
    seq = torch.tensor([c.prompt_token_ids + c.token_ids])
    with torch.no_grad():
        logits = engine.model(seq).logits[0]
    assert logits[len(c.prompt_token_ids) - 1:-1].argmax(-1).tolist() == c.token_ids


def test_stops_at_eos_without_padding(engine):
    prompts = [engine.encode_chat(chat) for chat in CHATS]
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    [free, _] = engine.generate_ids(prompts, greedy)
    eos = free.token_ids[2]  # pretend row 0's third token is an eos
    saved, engine.eos_ids = engine.eos_ids, {eos}
    try:
        stopped, other = engine.generate_ids(prompts, greedy)
    finally:
        engine.eos_ids = saved
    cut = free.token_ids.index(eos) + 1
    assert stopped.finish_reason == "stop" and stopped.token_ids == free.token_ids[:cut]
    assert stopped.logprobs == pytest.approx(free.logprobs[:cut], abs=1e-5)
    assert (other.finish_reason == "stop") == (eos in other.token_ids)
    assert eos not in other.token_ids[:-1]  # nothing generated after an eos


def test_update_weights_changes_outputs_and_version(engine):
    prompts = [engine.encode_chat(CHATS[0])]
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    [before] = engine.generate_ids(prompts, greedy)
    original = {k: v.clone() for k, v in engine.state_dict().items()}
    torch.manual_seed(1)
    noisy = {k: v + 0.5 * torch.randn_like(v) for k, v in original.items()}
    engine.update_weights(noisy, version=7)
    assert engine.weights_version == 7
    torch.testing.assert_close(engine.state_dict()["model.norm.weight"], noisy["model.norm.weight"])
    [after] = engine.generate_ids(prompts, greedy)
    assert after.logprobs != before.logprobs
    engine.update_weights(original, version=8)
    [restored] = engine.generate_ids(prompts, greedy)
    assert restored.token_ids == before.token_ids and restored.logprobs == before.logprobs
    with pytest.raises(ValueError, match="unknown names"):
        engine.update_weights({"no.such.weight": torch.zeros(1)}, version=9)
    with pytest.raises(ValueError, match="shape"):
        engine.update_weights({"model.norm.weight": torch.zeros(3)}, version=9)
    assert engine.weights_version == 8


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(LLMError, match="does not exist; pass a local HF folder or hub id"):
        make_client("embedded", str(tmp_path / "missing"))


def test_kbench_generate_runs_the_embedded_engine_where_engine_device_says(tiny_model):
    # kbench generate once built the embedded engine on the CPU even on a GPU machine
    from kbencheval.bench.common import make_llm_client
    from kbencheval.config import ConfigError

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert make_llm_client("embedded", tiny_model).device.type == expected
    assert make_llm_client("embedded", tiny_model, engine_device="cpu").device.type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(LLMError, match="torch sees no GPU"):
            make_llm_client("embedded", tiny_model, engine_device="cuda")
    with pytest.raises(ConfigError, match="engine_device='gpu'"):
        make_llm_client("embedded", tiny_model, engine_device="gpu")
    with pytest.raises(ConfigError, match="engine_device is for server_type=embedded"):
        make_llm_client("openai", "m", "http://127.0.0.1:1/v1", engine_device="cuda")


def test_kbench_generate_loads_the_embedded_engine_in_engine_dtype(tiny_model):
    # a model trained in fp32 is evaluated in fp32: in bf16 its small updates would round away
    from kbencheval.bench.common import make_llm_client
    from kbencheval.config import ConfigError

    engine = make_llm_client("embedded", tiny_model, engine_device="cpu", engine_dtype="bfloat16")
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    engine = make_llm_client("embedded", tiny_model, engine_device="cpu", engine_dtype="float32")
    assert next(engine.model.parameters()).dtype == torch.float32
    with pytest.raises(ConfigError, match="engine_dtype='fp64': use auto, float32"):
        make_llm_client("embedded", tiny_model, engine_dtype="fp64")
    with pytest.raises(ConfigError, match="engine_dtype is for server_type=embedded"):
        make_llm_client("openai", "m", "http://127.0.0.1:1/v1", engine_dtype="float32")


# ---------------- kbench serve + HTTP clients ----------------

@pytest.fixture(scope="module")
def server(tiny_model):
    with kbench_server(tiny_model) as served:
        yield served.url
    assert f"serving {tiny_model} on {served.url}" in served.log


def test_health_and_models(server, tiny_model):
    assert requests.get(f"{server}/health").json()["status"] == "ok"
    assert requests.get(f"{server}/v1/models").json()["data"][0]["id"] == tiny_model


def test_openai_client_against_serve(server, tiny_model):
    client = make_client("openai", tiny_model, base_url=server + "/v1", logprobs=True)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=3)
    groups = client.chat(CHATS, params)
    assert [len(g) for g in groups] == [2, 2]
    for c in (c for g in groups for c in g):
        assert c.ok and isinstance(c.text, str) and c.finish_reason in ("stop", "length")
        assert 1 <= len(c.logprobs) <= 10 and all(lp <= 0 for lp in c.logprobs)
    assert [c.text for c in client.chat(CHATS, params)[0]] == [c.text for c in groups[0]]  # seeded
    usage = requests.post(f"{server}/v1/chat/completions", json={"messages": CHATS[0], "max_tokens": 4}).json()["usage"]
    assert usage["completion_tokens"] <= 4 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    client.close()


def test_sglang_client_matches_embedded_engine(server, tiny_model, engine):
    client = make_client("sglang", tiny_model, base_url=server)
    params = SamplingParams(n=2, temperature=0.8, top_p=0.95, max_new_tokens=10, seed=11)
    remote = client.chat(CHATS, params)
    local = engine.chat(CHATS, params)  # same seeds -> same samples, in-process
    for r_group, l_group in zip(remote, local):
        for r, l in zip(r_group, l_group):
            assert r.ok and r.token_ids == l.token_ids and r.prompt_token_ids == l.prompt_token_ids
            assert r.finish_reason == l.finish_reason
            torch.testing.assert_close(torch.tensor(r.logprobs), torch.tensor(l.logprobs), atol=1e-5, rtol=0)
    client.close()


def test_bad_requests_get_400(server):
    for route, body in [("/generate", {"input_ids": [1], "sampling_params": {"stop": "x"}}),
                        ("/generate", {"input_ids": [10 ** 9]}),
                        ("/generate", {}),
                        ("/v1/chat/completions", {"messages": "hi"}),
                        ("/v1/chat/completions", {"messages": CHATS[0], "top_p": 0}),
                        ("/update_weights_from_disk", {})]:
        resp = requests.post(server + route, json=body)
        assert resp.status_code == 400, (route, body, resp.text)
        assert resp.json()["error"]["message"]
    assert requests.post(server + "/generate", data=b"{not json").status_code == 400


def test_update_weights_from_disk(server, tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    client = make_client("sglang", tiny_model, base_url=server)
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    [[before]] = client.chat(CHATS[:1], greedy)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    torch.manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "step1")
    reply = requests.post(f"{server}/update_weights_from_disk", json={"model_path": str(tmp_path / "step1")}).json()
    assert reply["success"] and reply["weights_version"] == 1
    assert requests.get(f"{server}/health").json()["weights_version"] == 1
    [[after]] = client.chat(CHATS[:1], greedy)
    assert after.logprobs != before.logprobs
    missing = requests.post(f"{server}/update_weights_from_disk", json={"model_path": str(tmp_path / "nope")})
    assert missing.status_code == 400 and "does not exist" in missing.json()["error"]["message"]
    client.close()
