"""kbench serve --model PATH [--host 127.0.0.1] [--port 30000] [--device cpu] [--dtype auto] [--threads N]

Serves a local HF model (the `EmbeddedEngine`) over HTTP with the routes our clients use, so the
OpenAI and SGLang clients, `kbench run-one` and rollout code can be exercised without SGLang:

    GET  /health                      200 once the model is loaded; weights_version, generate_requests,
                                      weight_update_groups, weight_transports, host_id
    GET  /v1/models                   the served model id (= --model)
    POST /v1/chat/completions         OpenAI format: messages, n, temperature, top_p, max_tokens, seed, logprobs
    POST /generate                    SGLang native: input_ids | text, sampling_params, return_logprob
    POST /update_weights_from_disk    {"model_path": DIR} -> loads new weights in place
    POST /update_weights_from_tensor, /init_weights_update_group, /update_weights_from_distributed,
         /destroy_weights_update_group   weights without disk (kbencheval.llm.serve_weights)

Generation is serialized by the engine's lock; this is a test and small-scale server, not a fast one.
The weight routes exist only so smart's SGLang engine can be tested without SGLang: they mirror
SGLang's routes of the same names and is a thin adapter over `EmbeddedEngine.update_weights`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kbencheval.llm.base import LLMError, SamplingParams
from kbencheval.llm.serve_weights import ROUTES as WEIGHT_ROUTES, WeightRouteError


class BadRequest(ValueError):
    """The client sent something we cannot serve; becomes HTTP 400 with this message."""


def _json_body(handler: BaseHTTPRequestHandler) -> dict:
    length = int(handler.headers.get("Content-Length") or 0)
    try:
        body = json.loads(handler.rfile.read(length) or b"null")
    except ValueError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _params(temperature, top_p, max_new_tokens, n, seed) -> SamplingParams:
    try:
        return SamplingParams(temperature=float(temperature), top_p=float(top_p), max_new_tokens=int(max_new_tokens),
                              n=int(n), seed=None if seed is None else int(seed))
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad sampling parameters: {exc}") from exc


def _check_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise BadRequest("each message needs a string 'role' and a string 'content'")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


class Handler(BaseHTTPRequestHandler):
    server: "KBenchServer"
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections

    def log_message(self, fmt, *args) -> None:  # one line per request is noise in test logs
        if self.server.verbose:
            super().log_message(fmt, *args)

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, routes: dict) -> None:
        route = routes.get(self.path.split("?", 1)[0])
        if route is None:
            self._send(404, {"error": {"message": f"no route {self.command} {self.path}"}})
            return
        try:
            self._send(200, route())
        except (BadRequest, LLMError, WeightRouteError) as exc:
            self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}, "success": False})
        except Exception as exc:  # a server bug must answer the client, not hang it
            self._send(500, {"error": {"message": f"{exc.__class__.__name__}: {exc}"[:500]}})

    def do_GET(self) -> None:
        self._dispatch({"/health": self.health, "/v1/models": self.models})

    def do_POST(self) -> None:
        self._dispatch({"/v1/chat/completions": self.chat_completions, "/generate": self.generate,
                        "/update_weights_from_disk": self.update_weights_from_disk,
                        **{path: self._weight_route(fn) for path, fn in WEIGHT_ROUTES.items()}})

    def _weight_route(self, fn):
        return lambda: fn(self.server, _json_body(self))

    # ---- routes ----
    def health(self) -> dict:
        with self.server.groups_lock:
            groups = sorted(self.server.weight_groups)
        return {"status": "ok", "weights_version": self.server.engine.weights_version,
                "generate_requests": self.server.generate_requests, "weight_update_groups": groups,
                **self.server.weight_transports}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.server.model_name, "object": "model", "owned_by": "kbench"}]}

    def chat_completions(self) -> dict:
        body = _json_body(self)
        if body.get("stream"):
            raise BadRequest("stream=true is not supported by kbench serve; send stream=false")
        messages = _check_messages(body.get("messages"))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 512))
        params = _params(body.get("temperature", 1.0), body.get("top_p", 1.0), max_tokens,
                         body.get("n", 1), body.get("seed"))
        engine = self.server.engine
        [samples] = engine.chat([messages], params)
        choices = []
        for i, c in enumerate(samples):
            logprobs = None
            if body.get("logprobs"):
                logprobs = {"content": [{"token": engine.tokenizer.decode([t]), "logprob": lp}
                                        for t, lp in zip(c.token_ids, c.logprobs)]}
            choices.append({"index": i, "message": {"role": "assistant", "content": c.text},
                            "finish_reason": c.finish_reason, "logprobs": logprobs})
        prompt_tokens = len(samples[0].prompt_token_ids or [])
        completion_tokens = sum(len(c.token_ids or []) for c in samples)
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
                "model": self.server.model_name, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def generate(self) -> dict | list:
        body = _json_body(self)
        with self.server.count_lock:  # lets tests see how a router spread requests over servers
            self.server.generate_requests += 1
        engine = self.server.engine
        prompts, single = self._generate_inputs(body, engine)
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("'sampling_params' must be an object")
        unknown = set(sp) - {"temperature", "top_p", "max_new_tokens", "n", "sampling_seed"}
        if unknown:
            raise BadRequest(f"unsupported sampling_params {sorted(unknown)}; kbench serve supports "
                             "temperature, top_p, max_new_tokens, n, sampling_seed")
        params = _params(sp.get("temperature", 1.0), sp.get("top_p", 1.0), sp.get("max_new_tokens", 128),
                         sp.get("n", 1), sp.get("sampling_seed"))
        rows = [p for p in prompts for _ in range(params.n)]  # SGLang's n: samples per prompt, flattened
        outs = []
        for c in engine.generate_ids(rows, params):
            if c.error:  # SGLang reports failed requests as finish_reason type "abort"
                outs.append({"text": "", "output_ids": [], "meta_info": {"finish_reason": {"type": "abort", "message": c.error}}})
                continue
            finish = {"type": c.finish_reason}
            if c.finish_reason == "length":
                finish["length"] = len(c.token_ids)
            else:
                finish["matched"] = c.token_ids[-1]
            meta = {"id": uuid.uuid4().hex, "prompt_tokens": len(c.prompt_token_ids),
                    "completion_tokens": len(c.token_ids), "finish_reason": finish,
                    "weights_version": engine.weights_version}
            if body.get("return_logprob"):
                meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(c.logprobs, c.token_ids)]
            outs.append({"text": c.text, "output_ids": c.token_ids, "meta_info": meta})
        return outs[0] if single and params.n == 1 else outs

    @staticmethod
    def _generate_inputs(body: dict, engine) -> tuple[list[list[int]], bool]:
        ids, text = body.get("input_ids"), body.get("text")
        if (ids is None) == (text is None):
            raise BadRequest("give exactly one of 'input_ids' or 'text'")
        if text is not None:
            texts = [text] if isinstance(text, str) else text
            if not (isinstance(texts, list) and texts and all(isinstance(t, str) and t for t in texts)):
                raise BadRequest("'text' must be a non-empty string or list of strings")
            return [engine.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], isinstance(text, str)
        single = isinstance(ids, list) and bool(ids) and all(isinstance(t, int) for t in ids)
        batch = [ids] if single else ids
        vocab = len(engine.tokenizer)
        if not (isinstance(batch, list) and batch and all(
                isinstance(p, list) and p and all(isinstance(t, int) and 0 <= t < vocab for t in p) for p in batch)):
            raise BadRequest(f"'input_ids' must be a non-empty list of token ids in [0, {vocab}) or a list of such lists")
        return batch, single

    def update_weights_from_disk(self) -> dict:
        body = _json_body(self)
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise BadRequest("'model_path' (a folder written by save_pretrained) is required")
        version = load_weights_from_disk(self.server.engine, path)
        return {"success": True, "message": f"loaded weights from {path}", "weights_version": version}


def load_weights_from_disk(engine, path: str) -> int:
    """Load a save_pretrained folder (same architecture) into the engine; returns the new version
    (one more than now; the client keeps its own version label, as with SGLang)."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    folder = Path(path).expanduser()
    if not folder.exists():
        raise BadRequest(f"model path {path} does not exist; pass a folder written by save_pretrained")
    source = AutoModelForCausalLM.from_pretrained(str(folder), dtype=engine.model.dtype)
    new_version = engine.weights_version + 1
    engine.update_weights(source.state_dict(), new_version)
    return new_version


class KBenchServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, engine, model_name: str, verbose: bool = False):
        super().__init__(address, Handler)
        self.engine, self.model_name, self.verbose = engine, model_name, verbose
        self.generate_requests, self.count_lock = 0, threading.Lock()  # POST /generate calls served so far
        self.weight_groups, self.group_locks, self.groups_lock = {}, {}, threading.Lock()  # serve_weights' groups
        from kbencheval.llm.weight_transfer import host_id, offered_transports

        # /update_weights_from_tensor payloads this server takes, and its host: the client picks from them
        self.weight_transports = {"weight_transports": offered_transports(engine.device), "host_id": host_id()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kbench serve", description="serve a local HF model over OpenAI and SGLang routes",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                 epilog="example: kbench serve --model runs/tiny-model --port 30000 --threads 1")
    ap.add_argument("--model", metavar="PATH", required=True, help="local HF folder or hub id")
    ap.add_argument("--host", metavar="STR", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--port", metavar="INT", type=int, default=30000, help="port to listen on")
    ap.add_argument("--device", metavar="STR", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--dtype", metavar="STR", default="auto", help="auto (bf16 on GPU, fp32 on CPU), float32, bfloat16, float16")
    ap.add_argument("--threads", metavar="INT", type=int, default=None,
                    help="torch CPU threads; 1 is much faster for tiny models on a busy machine")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    args = ap.parse_args(argv)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)

    from kbencheval.llm.embedded import EmbeddedEngine

    try:
        engine = EmbeddedEngine(args.model, device=args.device, dtype=args.dtype)
    except (LLMError, ValueError) as exc:
        print(f"kbench serve: {exc}", file=sys.stderr)
        return 2
    server = KBenchServer((args.host, args.port), engine, args.model, args.verbose)
    host, port = server.server_address[:2]
    print(f"serving {args.model} on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
