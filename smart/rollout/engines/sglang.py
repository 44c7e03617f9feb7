"""`SGLangEngineActor`: one already-running SGLang server behind the `Engine` protocol.

    kbench serve --model runs/sft_tiny/hf --port 30000 --threads 1 &     # or python -m sglang.launch_server on a GPU
    smart rl configs/rl_tiny_cpu.yaml rollout.engine=sglang "rollout.sglang_urls=['http://127.0.0.1:30000']"

Generation uses SGLang's native POST /generate (token ids in; output ids and per-token logprobs out),
so nothing is re-tokenized. Weights move through disk: the trainer writes a save_pretrained folder
and the engine POSTs {"model_path": folder, "weight_version": "N"} to /update_weights_from_disk, so
the folder must be visible to the server (same machine or shared storage). Written against SGLang's
documented request fields and tested against `kbench serve`, not a real SGLang server.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import shutil
from pathlib import Path

import ray
import requests

from kbencheval.config import ConfigError
from kbencheval.llm.base import Completion, SamplingParams
from smart.rollout.engines import EngineKind


class SGLangUnreachable(ConfigError):
    """A configured server did not answer /health."""


class EngineWeightsUnavailable(NotImplementedError):
    """The server keeps its weights; there is no route to read them back."""


def check_server(base_url: str, timeout_s: float = 5.0) -> None:
    """Raise SGLangUnreachable (one line naming the URL and the fix) unless GET {base_url}/health is 200."""
    url = f"{base_url.rstrip('/')}/health"
    try:
        resp = requests.get(url, timeout=timeout_s)
        reason = "" if resp.ok else f"HTTP {resp.status_code}"
    except requests.RequestException as exc:
        reason = exc.__class__.__name__
    if reason:
        raise SGLangUnreachable(
            f"cannot reach the SGLang server at {url} ({reason}); start it with `python -m sglang.launch_server "
            f"--model-path MODEL --port PORT` (on CPU: `kbench serve --model MODEL --port PORT`) or fix rollout.sglang_urls")


@ray.remote(num_cpus=0)  # the server does the work; the actor only waits on HTTP
class SGLangEngineActor:
    def __init__(self, base_url: str, model_path: str, timeout_s: float = 600.0, max_concurrency: int = 32,
                 max_retries: int = 3):
        from kbencheval.llm.http import SGLangClient

        check_server(base_url)
        self.base_url, self.timeout_s = base_url.rstrip("/"), timeout_s
        self.client = SGLangClient(model_path, self.base_url, max_concurrency=max_concurrency, timeout=timeout_s,
                                   max_retries=max_retries)
        self.pool = cf.ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="sglang-engine")
        self.version = 0

    def generate_ids(self, prompt_ids_batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One request per prompt so each keeps its own seed (row i uses seed + i, as the embedded engine)."""
        if params.n != 1:
            raise ValueError("generate_ids samples one continuation per prompt; repeat the prompt instead of n > 1")
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompt_ids_batch))]
        futures = [self.pool.submit(self.client.generate_ids, ids, params, seed)
                   for ids, seed in zip(prompt_ids_batch, seeds)]
        return [f.result() for f in futures]

    def push(self, model_path: str, version: int) -> int:
        """Load a save_pretrained folder into the server, then record `version` (returned)."""
        url = f"{self.base_url}/update_weights_from_disk"
        body = {"model_path": model_path, "weight_version": str(version)}
        try:
            resp = requests.post(url, json=body, timeout=self.timeout_s)
            reply = resp.json()
        except (requests.RequestException, ValueError) as exc:
            raise RuntimeError(f"{url} failed ({exc.__class__.__name__}: {exc}); is the server still up?") from None
        if not resp.ok or not reply.get("success"):
            message = reply.get("message") or (reply.get("error") or {}).get("message") or resp.text[:300]
            raise RuntimeError(f"{url} refused {model_path} (HTTP {resp.status_code}): {message}; "
                               "the folder must be a save_pretrained folder of the served architecture, visible to the server")
        self.version = int(version)
        return self.version

    def weights_version(self) -> int:
        return self.version

    def state_dict(self) -> dict:
        raise EngineWeightsUnavailable(
            f"the SGLang engine at {self.base_url} cannot return its weights (SGLang has no route to read them); "
            "compare weights with rollout.engine=embedded")


@dataclasses.dataclass(frozen=True)
class DiskWeights:
    """The trainer writes a save_pretrained folder `folder/vNNNNNN` that every server loads; once all
    serve it, older folders are removed. The folder must be visible to the servers."""

    folder: str

    def pack(self, trainer, version: int) -> str:
        path = (Path(self.folder) / f"v{version:06d}").resolve()
        trainer.export_hf(str(path))
        return str(path)

    def release(self, version: int) -> None:
        for old in Path(self.folder).glob("v*"):
            if old.name != f"v{version:06d}":
                shutil.rmtree(old, ignore_errors=True)


def _preflight(cfg) -> None:
    for url in cfg.rollout.sglang_urls:
        check_server(url)


def _start(cfg, slots: list) -> list:
    # The servers run elsewhere: the actors only wait on HTTP and take no reserved slot.
    return [SGLangEngineActor.remote(url, cfg.model_path, cfg.rollout.sglang_timeout_s) for url in cfg.rollout.sglang_urls]


KIND = EngineKind(needs_slots=False, preflight=_preflight, start=_start,
                  weights_sink=lambda cfg: DiskWeights(str(Path(cfg.out_dir) / "engine_weights")))
