"""HTTP generation clients: OpenAI-compatible chat completions and SGLang's native /generate.

    client = OpenAIClient("gpt-4o-mini")                                  # key from $OPENAI_API_KEY
    client = OpenAIClient("qwen3", base_url="http://127.0.0.1:30000/v1")  # SGLang / vLLM / kbench serve
    client = SGLangClient("/models/qwen3-8b", base_url="http://127.0.0.1:30000")

Requests run on a thread pool (max_concurrency at a time); 429, 5xx, timeouts and refused
connections are retried with exponential backoff. If the server cannot be reached at all, or
rejects our key or route, `LLMError` says how to fix the setup; any other failed or malformed
answer becomes `Completion(error=...)` for that prompt only.

The SGLang client sends token ids (chat template applied locally with the model's HF tokenizer)
and reads back output ids plus per-token logprobs, which is what RL needs. It is written against
SGLang's documented native API (`input_ids`, `sampling_params`, `return_logprob`; response
`text`, `output_ids`, `meta_info.output_token_logprobs` as [logprob, token_id, text] and
`meta_info.finish_reason.type`) and tested here against `kbench serve`, not a real SGLang server.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import random
import threading
import time
from typing import Any, Callable
from urllib.parse import urlparse

import requests

from kbencheval.llm.base import Completion, LLMError, SamplingParams, encode_chat, resolve_model_path

_LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0", "::1")
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
_SETUP_STATUS = {401: "the server rejected the API key", 403: "the API key may not use this model/route",
                 404: "route or model not found"}


class _HTTPBase:
    """Shared plumbing: session pool, retries with backoff, fan-out over a thread pool."""

    def __init__(self, base_url: str, *, max_concurrency: int, timeout: float, max_retries: int,
                 backoff: float, headers: dict[str, str] | None = None):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.max_concurrency = max_concurrency
        # Every request's headers, the API key's Authorization among them (public: which key a preset read).
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._local = threading.local()  # requests.Session is not thread-safe; one per worker thread
        self._pool = cf.ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="llm-http")

    def _session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def _post(self, route: str, body: dict) -> dict | Completion:
        """The parsed JSON answer, a Completion(error=...) for a per-request failure, or LLMError."""
        url = f"{self.base_url}{route}"
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                # Exponential backoff with jitter so a burst of clients does not retry in lockstep.
                time.sleep(self.backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
            try:
                resp = self._session().post(url, json=body, headers=self.headers, timeout=self.timeout)
            except requests.ConnectionError as exc:
                last = f"connection failed: {exc.__class__.__name__}"
                continue
            except requests.Timeout:
                last = f"timed out after {self.timeout}s"
                continue
            if resp.status_code in _SETUP_STATUS:
                raise LLMError(f"{url} answered HTTP {resp.status_code} ({_SETUP_STATUS[resp.status_code]}): "
                               f"{resp.text[:200]!r}; check base_url, model name and API key")
            if resp.status_code in _RETRY_STATUS:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code >= 400:
                return Completion(text="", error=f"HTTP {resp.status_code}: {resp.text[:300]}")
            try:
                return resp.json()
            except ValueError:
                return Completion(text="", error=f"malformed response (not JSON): {resp.text[:200]!r}")
        if last.startswith("connection failed"):
            raise LLMError(f"cannot reach {url} after {self.max_retries + 1} tries ({last}); "
                           "start the server (e.g. `kbench serve --model PATH`) or fix base_url")
        return Completion(text="", error=f"gave up after {self.max_retries + 1} tries: {last}")

    def _fan_out(self, jobs: list[Callable[[], Any]]) -> list[Any]:
        futures = [self._pool.submit(job) for job in jobs]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:  # an LLMError means every other request would fail too
                f.cancel()
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _with_v1(base_url: str) -> str:
    """Accept http://host:port as well as http://host:port/v1 for OpenAI-compatible servers."""
    base_url = base_url.rstrip("/")
    return base_url + "/v1" if urlparse(base_url).path in ("", "/") else base_url


def _without_v1(base_url: str) -> str:
    base_url = base_url.rstrip("/")
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


class OpenAIClient(_HTTPBase):
    """POST {base_url}/chat/completions, one request per conversation with `n` choices."""

    def __init__(self, model_name: str, base_url: str | None = None, *, api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", max_concurrency: int = 8, timeout: float = 600.0,
                 max_retries: int = 3, backoff: float = 1.0, logprobs: bool = False,
                 extra_body: dict | None = None):
        base_url = _with_v1(base_url or "https://api.openai.com/v1")
        key = api_key or os.environ.get(api_key_env)
        if not key:
            if urlparse(base_url).hostname not in _LOCAL_HOSTS:
                raise LLMError(f"missing API key for {base_url}: set ${api_key_env} (or pass api_key_env=NAME)")
            key = "EMPTY"  # local servers (SGLang, vLLM, kbench serve) ignore the key
        super().__init__(base_url, max_concurrency=max_concurrency, timeout=timeout, max_retries=max_retries,
                         backoff=backoff, headers={"Authorization": f"Bearer {key}"})
        self.model_name = model_name
        self.logprobs = logprobs  # off by default: many hosted models refuse it
        self.extra_body = dict(extra_body or {})

    def _body(self, messages: list[dict], params: SamplingParams) -> dict:
        body = {"model": self.model_name, "messages": messages, "n": params.n,
                "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_new_tokens}
        if params.seed is not None:
            body["seed"] = params.seed
        if self.logprobs:
            body["logprobs"] = True
        return {**body, **self.extra_body}

    def _one(self, messages: list[dict], params: SamplingParams) -> list[Completion]:
        answer = self._post("/chat/completions", self._body(messages, params))
        if isinstance(answer, Completion):
            return [dataclasses.replace(answer) for _ in range(params.n)]
        try:
            choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))
            out = [self._parse_choice(c) for c in choices[: params.n]]
        except (KeyError, TypeError, AttributeError) as exc:
            snippet = str(answer)[:200]
            return [Completion(text="", error=f"malformed response ({exc!r}): {snippet}") for _ in range(params.n)]
        missing = params.n - len(out)
        return out + [Completion(text="", error=f"server returned {len(out)} of {params.n} choices")
                      for _ in range(missing)]

    @staticmethod
    def _parse_choice(choice: dict) -> Completion:
        content = choice["message"]["content"]
        if content is not None and not isinstance(content, str):
            raise TypeError(f"message.content is {type(content).__name__}, expected a string")
        logprobs = None
        if (choice.get("logprobs") or {}).get("content"):
            logprobs = [float(t["logprob"]) for t in choice["logprobs"]["content"]]
        return Completion(text=content or "", logprobs=logprobs, finish_reason=str(choice.get("finish_reason") or ""))

    def chat(self, messages_batch: list[list[dict]], params: SamplingParams) -> list[list[Completion]]:
        return self._fan_out([lambda m=m: self._one(m, params) for m in messages_batch])


class SGLangClient(_HTTPBase):
    """POST {base_url}/generate with token ids; one request per sample so each has its own seed."""

    def __init__(self, model_name: str, base_url: str | None = None, *, tokenizer=None,
                 max_concurrency: int = 32, timeout: float = 600.0, max_retries: int = 3, backoff: float = 1.0):
        super().__init__(_without_v1(base_url or "http://127.0.0.1:30000"), max_concurrency=max_concurrency,
                         timeout=timeout, max_retries=max_retries, backoff=backoff)
        self.model_name = model_name
        self.tokenizer = tokenizer if tokenizer is not None else self._load_tokenizer(model_name)

    @staticmethod
    def _load_tokenizer(model_name: str):
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(resolve_model_path(model_name))
        except OSError as exc:
            raise LLMError(f"could not load the tokenizer of {model_name} ({exc.__class__.__name__}); "
                           "server_type=sglang needs model_name = the served model's HF folder or hub id") from exc

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return encode_chat(self.tokenizer, messages)

    def generate_ids(self, prompt_ids: list[int], params: SamplingParams, seed: int | None = None) -> Completion:
        sampling = {"temperature": params.temperature, "top_p": params.top_p, "max_new_tokens": params.max_new_tokens}
        if seed is not None:
            sampling["sampling_seed"] = seed
        answer = self._post("/generate", {"input_ids": prompt_ids, "sampling_params": sampling, "return_logprob": True})
        if isinstance(answer, Completion):
            answer.prompt_token_ids = list(prompt_ids)
            return answer
        try:
            return self._parse(answer, prompt_ids)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            return Completion(text="", prompt_token_ids=list(prompt_ids),
                              error=f"malformed /generate response ({exc!r}): {str(answer)[:200]}")

    @staticmethod
    def _parse(answer: dict, prompt_ids: list[int]) -> Completion:
        meta = answer["meta_info"]
        entries = meta.get("output_token_logprobs") or []
        logprobs = [float(e[0]) for e in entries]
        token_ids = answer.get("output_ids")
        if token_ids is None:  # older servers only return ids inside the logprob entries
            token_ids = [int(e[1]) for e in entries]
        token_ids = [int(t) for t in token_ids]
        if entries and len(entries) != len(token_ids):
            raise ValueError(f"{len(token_ids)} output ids but {len(entries)} logprobs")
        finish = meta.get("finish_reason")
        finish = finish.get("type", "") if isinstance(finish, dict) else str(finish or "")
        text = answer["text"]
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, expected a string")
        return Completion(text=text, token_ids=token_ids, logprobs=logprobs or None,
                          prompt_token_ids=list(prompt_ids), finish_reason=finish)

    def chat(self, messages_batch: list[list[dict]], params: SamplingParams) -> list[list[Completion]]:
        prompts = [self.encode_chat(m) for m in messages_batch]
        jobs = [lambda p=p, k=k: self.generate_ids(p, params, None if params.seed is None else params.seed + k)
                for p in prompts for k in range(params.n)]
        flat = self._fan_out(jobs)
        return [flat[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]
