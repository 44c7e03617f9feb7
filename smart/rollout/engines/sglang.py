"""`SGLangEngineActor`: one already-running SGLang server behind the `Engine` protocol.

    kbench serve --model runs/sft_tiny/hf --port 30000 --threads 1 &     # or python -m sglang.launch_server on a GPU
    smart rl configs/rl_tiny_cpu.yaml rollout.engine=sglang "rollout.sglang_urls=['http://127.0.0.1:30000']"

With rollout.router=sglang, generation goes through one sglang-router in front of the servers
(smart.rollout.engines.router; started by the run, or joined at rollout.router_url) while each engine
still loads weights into its own server; a dropped engine takes its server out of the router.

Generation uses SGLang's native POST /generate (token ids in; output ids and per-token logprobs out),
so nothing is re-tokenized. Weights move as rollout.sglang_weight_sync says: `disk` (default) writes a
save_pretrained folder and the engine POSTs {"model_path": folder, "weight_version": "N"} to
/update_weights_from_disk, so the folder must be visible to the server (same machine or shared
storage); `tensor` and `distributed` need no disk (smart.rollout.engines.weight_sync). Written against
SGLang's documented request fields and tested against `kbench serve`, not a real SGLang server.
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
from smart.rollout.engines.router import FIX, RouterError, SGLangRouter, check_router
from smart.rollout.engines.weight_sync import DistributedPuller, DistributedWeights, TensorPusher, TensorWeights


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
                 max_retries: int = 3, router=None, generate_url: str = "", weight_sync: str = "disk",
                 tensor_transport: str = "auto"):
        """base_url: this engine's server (weights, health); generate_url: where generation goes
        ("" = base_url; a router's URL); router: that router's actor handle, told when this engine is dropped;
        weight_sync: disk | tensor | distributed (rollout.sglang_weight_sync; the sink's plan sets the buckets);
        tensor_transport: auto (per server, see weight_sync.pick_transport) or cuda_ipc | shm | bytes."""
        from kbencheval.llm.http import SGLangClient

        check_server(base_url)
        self.base_url, self.timeout_s, self.router = base_url.rstrip("/"), timeout_s, router
        self.client = SGLangClient(model_path, generate_url or self.base_url, max_concurrency=max_concurrency,
                                   timeout=timeout_s, max_retries=max_retries)
        self.pool = cf.ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="sglang-engine")
        self.version = 0
        self.weight_sync = weight_sync
        self.puller = DistributedPuller(self.base_url, timeout_s) if weight_sync == "distributed" else None
        self.pusher = TensorPusher(self.base_url, timeout_s, tensor_transport) if weight_sync == "tensor" else None

    def generate_ids(self, prompt_ids_batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One request per prompt so each keeps its own seed (row i uses seed + i, as the embedded engine)."""
        if params.n != 1:
            raise ValueError("generate_ids samples one continuation per prompt; repeat the prompt instead of n > 1")
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompt_ids_batch))]
        futures = [self.pool.submit(self.client.generate_ids, ids, params, seed)
                   for ids, seed in zip(prompt_ids_batch, seeds)]
        return [f.result() for f in futures]

    def push(self, weights, version: int) -> int:
        """Load what this kind's sink packed (a folder, or a StagedPlan for tensor and distributed) into the
        server, then record `version` (returned). A refused load raises and leaves the version alone."""
        if self.weight_sync == "tensor":
            self.pusher.push(weights, version)
        elif self.weight_sync == "distributed":
            self.puller.push(weights, version)
        else:
            self._push_folder(weights, version)
        self.version = int(version)
        return self.version

    def _push_folder(self, model_path: str, version: int) -> None:
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

    def weights_version(self) -> int:
        return self.version

    def weight_transport(self) -> str:
        """How the last push travelled: disk, distributed, or tensor's cuda_ipc | shm | bytes."""
        return self.pusher.last if self.pusher is not None else self.weight_sync

    def health(self, timeout_s: float) -> None:
        check_server(self.base_url, timeout_s)

    def retire(self) -> None:
        """Take this engine's server out of the router, so no request is sent to it any more; destroy its
        weight update group."""
        self.close()
        if self.router is not None:
            ray.get(self.router.remove.remote(self.base_url), timeout=60)

    def close(self) -> None:
        """The run ends: destroy the weight update group on the server and the trainer (distributed sync)."""
        if self.puller is not None:
            self.puller.close()

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
    if cfg.rollout.router:
        check_router(cfg.rollout.router_url)


def start_router(rc, worker_urls: list[str]):
    """A router actor in front of `worker_urls` (it owns the router process, or joins rollout.router_url),
    and its URL. The actor is owned by the caller (the rollout manager): when that dies, so does the router."""
    router = ray.remote(num_cpus=0)(SGLangRouter).remote(worker_urls, rc.router_url, rc.router_policy,
                                                           request_timeout_s=rc.sglang_timeout_s)
    try:
        return router, ray.get(router.endpoint.remote(), timeout=120)
    except Exception as exc:  # the constructor's RouterError, wrapped by Ray: keep its one line
        ray.kill(router)
        text = str(exc)
        line = next((ln for ln in reversed(text.splitlines()) if "RouterError" in ln), text.splitlines()[-1] if text else "")
        raise RouterError(line.split("RouterError: ", 1)[-1] or f"sglang-router did not start: {FIX}") from None


def _start(cfg, slots: list) -> list:
    # The servers run elsewhere: the actors only wait on HTTP and take no reserved slot.
    rc = cfg.rollout
    router, generate_url = start_router(rc, rc.sglang_urls) if rc.router else (None, "")
    return [SGLangEngineActor.remote(url, cfg.model_path, rc.sglang_timeout_s, router=router, generate_url=generate_url,
                                     weight_sync=rc.sglang_weight_sync)
            for url in rc.sglang_urls]


def _bucket_bytes(rc) -> int:
    return max(1, int(rc.weight_bucket_mb * (1 << 20)))


def _weights_sink(cfg):
    """rollout.sglang_weight_sync picks the trainer-side half: a folder, or weights staged on the trainer's
    rank 0 that engines pull as tensor payloads or a broadcast."""
    rc = cfg.rollout
    if rc.sglang_weight_sync == "tensor":
        return TensorWeights(_bucket_bytes(rc))
    if rc.sglang_weight_sync == "distributed":
        return DistributedWeights(_bucket_bytes(rc))
    return DiskWeights(str(Path(cfg.out_dir) / "engine_weights"))


KIND = EngineKind(needs_slots=False, preflight=_preflight, start=_start, weights_sink=_weights_sink, on_dead="drop")
