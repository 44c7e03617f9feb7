"""python -m pytest tests/smart/test_llm_http.py -q

HTTP clients against a scripted fake server (no model): retries, setup errors, malformed answers.
The same clients against a real `kbench serve` are tested in tests/smart/test_llm.py.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kbencheval.llm import Completion, LLMError, SamplingParams, make_client
from kbencheval.llm.http import OpenAIClient, SGLangClient

MSG = [{"role": "user", "content": "hi"}]


class FakeServer:
    """Answers POSTs from a queue of (status, body) and records the requests it saw."""

    def __init__(self):
        self.replies: list[tuple[int, object]] = []
        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body))
                status, reply = fake.replies.pop(0) if fake.replies else (200, {})
                data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


class CharTokenizer:
    """Stands in for an HF tokenizer: one id per character, a trivial chat template."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        return "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


def _openai(url, **kw):
    return OpenAIClient("m", base_url=url, backoff=0.01, **kw)


def _choice(text, index=0):
    return {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}


def test_sampling_params_validate():
    for bad in (dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(max_new_tokens=0), dict(n=0)):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    SamplingParams(temperature=0, top_p=1.0)  # greedy is valid


def test_make_client_rejects_unknown_type():
    with pytest.raises(ValueError, match="openai, sglang, embedded"):
        make_client("vllm", "m")


def test_missing_key_for_hosted_api(monkeypatch):
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(LLMError, match=r"\$MY_KEY"):
        make_client("openai", "gpt", base_url="https://api.example.com/v1", api_key_env="MY_KEY")
    monkeypatch.setenv("MY_KEY", "sk-test")
    make_client("openai", "gpt", base_url="https://api.example.com/v1", api_key_env="MY_KEY").close()


def test_unreachable_server_raises_fast():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = _openai(f"http://127.0.0.1:{port}", max_retries=2, timeout=2)
    t0 = time.perf_counter()
    with pytest.raises(LLMError, match="cannot reach .*kbench serve"):
        client.chat([MSG], SamplingParams())
    assert time.perf_counter() - t0 < 5
    client.close()


def test_openai_request_and_parse(fake):
    fake.replies = [(200, {"choices": [_choice("b", 1), _choice("a", 0)]})]
    client = _openai(fake.url)  # no /v1 given: the client adds it
    [[c0, c1]] = client.chat([MSG], SamplingParams(n=2, temperature=0.5, top_p=0.8, max_new_tokens=7, seed=3))
    assert (c0.text, c1.text) == ("a", "b") and c0.ok and c0.finish_reason == "stop"
    path, body = fake.requests[0]
    assert path == "/v1/chat/completions"
    assert body == {"model": "m", "messages": MSG, "n": 2, "temperature": 0.5, "top_p": 0.8,
                    "max_tokens": 7, "seed": 3}


def test_retries_then_succeeds(fake):
    fake.replies = [(503, "busy"), (429, "slow down"), (200, {"choices": [_choice("ok")]})]
    [[c]] = _openai(fake.url, max_retries=3).chat([MSG], SamplingParams())
    assert c.text == "ok" and len(fake.requests) == 3


def test_retries_exhausted_is_a_sample_error(fake):
    fake.replies = [(500, "boom")] * 3
    [[c]] = _openai(fake.url, max_retries=2).chat([MSG], SamplingParams())
    assert not c.ok and "500" in c.error and len(fake.requests) == 3


def test_auth_failure_is_a_setup_error(fake):
    fake.replies = [(401, {"error": "bad key"})]
    with pytest.raises(LLMError, match="401"):
        _openai(fake.url).chat([MSG], SamplingParams())


@pytest.mark.parametrize("reply", [
    "not json at all",
    {"no_choices": []},
    {"choices": [{"message": {"content": ["not", "a", "string"]}}]},
    {"choices": [{"index": 0}]},
])
def test_openai_malformed_becomes_completion_error(fake, reply):
    fake.replies = [(200, reply)]
    [[c0, c1]] = _openai(fake.url).chat([MSG], SamplingParams(n=2))
    assert not c0.ok and not c1.ok and "malformed" in c0.error
    assert c0 is not c1  # callers may annotate samples independently


def test_openai_too_few_choices(fake):
    fake.replies = [(400, "bad request"), (200, {"choices": [_choice("x")]})]
    [[bad]], [[good, missing]] = (_openai(fake.url).chat([MSG], SamplingParams(n=1)),
                                 _openai(fake.url).chat([MSG], SamplingParams(n=2)))
    assert "400" in bad.error
    assert good.ok and "1 of 2" in missing.error


def _sglang_reply(ids, lps, finish="stop"):
    return {"text": "".join(chr(i) for i in ids), "output_ids": ids,
            "meta_info": {"finish_reason": {"type": finish},
                          "output_token_logprobs": [[lp, i, None] for lp, i in zip(lps, ids)]}}


def test_sglang_request_and_parse(fake):
    fake.replies = [(200, _sglang_reply([104, 105], [-0.5, -1.5])), (200, _sglang_reply([33], [-2.0], "length"))]
    client = SGLangClient("tok", base_url=fake.url + "/v1", tokenizer=CharTokenizer(), max_concurrency=1)
    [[a, b]] = client.chat([MSG], SamplingParams(n=2, temperature=1.0, top_p=0.9, max_new_tokens=5, seed=10))
    prompt = [ord(c) for c in "[user]hi[assistant]"]
    assert a == Completion(text="hi", token_ids=[104, 105], logprobs=[-0.5, -1.5], prompt_token_ids=prompt,
                           finish_reason="stop")
    assert b.finish_reason == "length" and b.token_ids == [33]
    (path, body0), (_, body1) = fake.requests
    assert path == "/generate" and body0["input_ids"] == prompt and body0["return_logprob"] is True
    assert body0["sampling_params"] == {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 5, "sampling_seed": 10}
    assert body1["sampling_params"]["sampling_seed"] == 11  # sample k gets seed + k


@pytest.mark.parametrize("reply", [
    {"text": "x"},  # no meta_info
    {"text": "x", "output_ids": [1, 2], "meta_info": {"output_token_logprobs": [[-1.0, 1, None]]}},  # length mismatch
    {"text": 5, "output_ids": [], "meta_info": {}},
    "<html>proxy error</html>",
])
def test_sglang_malformed_becomes_completion_error(fake, reply):
    fake.replies = [(200, reply)]
    client = SGLangClient("tok", base_url=fake.url, tokenizer=CharTokenizer())
    [[c]] = client.chat([MSG], SamplingParams())
    assert not c.ok and "malformed" in c.error and c.prompt_token_ids


def test_sglang_missing_tokenizer_path():
    with pytest.raises(LLMError, match="does not exist"):
        SGLangClient("/no/such/model", base_url="http://127.0.0.1:1")
