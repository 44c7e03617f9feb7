"""Weight sync to SGLang servers without disk: rollout.sglang_weight_sync = tensor | distributed.

    smart rl configs/rl_tiny_cpu.yaml rollout.engine=sglang "rollout.sglang_urls=[...]" rollout.sglang_weight_sync=tensor

Both start the same way: `pack` has every trainer rank gather the full state dict in the compute dtype
(bf16 on GPUs, as export_hf writes it for the disk path), rank 0 keeps it (its process, `_STAGED`) and
returns the bucket plan (names, dtypes, shapes; buckets of at most rollout.weight_bucket_mb).

tensor: for each bucket the engine actor asks rank 0 for a payload (the next one is prepared while the
server loads this one) and POSTs it to its server's /update_weights_from_tensor (SGLang's fields). How
the tensors travel is picked per server (kbencheval.llm.weight_transfer has the formats): `cuda_ipc`
(a GPU trainer on the server's host: CUDA IPC handles, SGLang's own scheme; rank 0 keeps the bucket on
its GPU until the server answered), `shm` (kbench serve on the trainer's host: a /dev/shm file per
bucket, shared by every engine, removed at release) or `bytes` (anything else: by value, base64 in
JSON, ~20x slower on CPU). Tensors pass through the Ray object store only as `bytes` payloads.

distributed: each engine forms its own two-rank group with the trainer's rank 0 (POST
/init_weights_update_group; gloo on CPU, nccl when the trainer has a GPU) once, and for each bucket asks
rank 0 to broadcast it while it POSTs the names, dtypes and shapes to /update_weights_from_distributed.
NCCL refuses two ranks on one GPU, so a server sharing the trainer's GPU needs disk or tensor. One group
per server (not one for all): the Engine protocol does not tell the sink which servers are alive, and a
dropped server then breaks only its own group. `retire` (a dropped server) and `close` (the end of the
run) destroy the group on both sides. Every HTTP call, group join and broadcast has a timeout
(rollout.sglang_timeout_s).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
import uuid
from typing import Any

import ray
import requests

# ---- rank 0 of the trainer: these run inside its TrainRank (TrainRank.run), state kept per process ----
_STAGED: dict[int, "StagedWeights"] = {}  # version -> its weights, until every engine has it
_GROUPS: dict[str, Any] = {}  # group name -> WeightGroup (or the error that stopped it forming)


def bucket_plan(state_dict: dict, bucket_bytes: int) -> list[list[tuple[str, str, list[int]]]]:
    """(name, dtype, shape) in state-dict order, cut into buckets of at most bucket_bytes (a larger
    tensor gets a bucket of its own)."""
    from kbencheval.llm.weight_transfer import dtype_name

    buckets, size = [[]], 0
    for name, t in state_dict.items():
        nbytes = t.numel() * t.element_size()
        if buckets[-1] and size + nbytes > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append((name, dtype_name(t.dtype), list(t.shape)))
        size += nbytes
    return [b for b in buckets if b]


class StagedWeights:
    """One version of the weights (CPU tensors) and its buckets, each encoded on demand per transport:
    shm files are written once and shared by every engine; a cuda_ipc bucket is copied to the GPU and
    held while any engine's request is in flight (engines release it with `done`)."""

    def __init__(self, state: dict, bucket_bytes: int, device=None):
        self.state, self.buckets = state, bucket_plan(state, bucket_bytes)
        self.device = device  # where cuda_ipc buckets go (rank 0's GPU)
        self.shm: dict[int, tuple[str, str]] = {}  # bucket -> (path, manifest)
        self.cuda: dict[int, list] = {}  # bucket -> [named GPU views of one buffer, requests in flight]

    def named(self, i: int) -> list:
        return [(n, self.state[n]) for n, _, _ in self.buckets[i]]

    def payload(self, i: int, transport: str) -> str:
        from kbencheval.llm import weight_transfer as wt

        if transport == "bytes":
            return wt.encode_bytes(self.named(i))
        if transport == "shm":
            if i not in self.shm:
                self.shm[i] = wt.write_shm(self.named(i))
            return self.shm[i][1]
        if transport == "cuda_ipc":
            entry = self.cuda.setdefault(i, [None, 0])
            if entry[0] is None:
                entry[0] = self._to_cuda(self.named(i))
            entry[1] += 1
            return wt.encode_cuda_ipc(entry[0])
        raise ValueError(f"unknown tensor transport {transport!r}; one of cuda_ipc, shm, bytes")

    def _to_cuda(self, named: list) -> list:
        """One GPU buffer per bucket (one IPC handle for the server to open), a view per tensor."""
        import torch

        from kbencheval.llm.weight_transfer import _layout

        offsets, size = _layout(named)
        flat = torch.empty(max(size, 1), dtype=torch.uint8, device=self.device or "cuda")
        views = []
        for (n, t), off in zip(named, offsets):
            view = flat[off:off + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
            view.copy_(t, non_blocking=False)
            views.append((n, view))
        return views

    def done(self, i: int) -> None:
        """A server answered for cuda_ipc bucket i: free it once no other request uses it (torch keeps the
        memory until the server's handle is released)."""
        entry = self.cuda.get(i)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del self.cuda[i]

    def close(self) -> None:
        from kbencheval.llm.weight_transfer import unlink_shm

        for path, _ in self.shm.values():
            unlink_shm(path)
        had_cuda, self.shm, self.cuda = bool(self.cuda), {}, {}
        if had_cuda:
            import torch

            torch.cuda.ipc_collect()


def stage_weights(backend, version: int, bucket_bytes: int) -> dict:
    """Every rank joins the gather; rank 0 keeps the weights and returns the plan (others: no buckets).
    In the compute dtype, as export_hf writes them for the disk path (bf16 on GPUs: half the bytes)."""
    import torch

    from kbencheval.llm.weight_transfer import host_id

    state = backend.state_dict_for_sync(getattr(backend, "compute_dtype", None))
    if not state:
        return {"buckets": [], "backend": ""}
    _drop_staged()  # one version at a time: the previous sync finished (or failed) before this one started
    device = getattr(backend, "device", None)
    cuda = device.type == "cuda" if isinstance(device, torch.device) else torch.cuda.is_available()
    staged = _STAGED[version] = StagedWeights(state, bucket_bytes, device if cuda else None)
    return {"buckets": staged.buckets, "backend": "nccl" if torch.cuda.is_available() else "gloo", "cuda": cuda,
            "host_id": host_id(), "node_ip": ray.util.get_node_ip_address()}


def _drop_staged() -> None:
    for staged in _STAGED.values():
        staged.close()
    _STAGED.clear()


def unstage_weights(backend, version: int) -> None:
    staged = _STAGED.pop(version, None)
    if staged is not None:
        staged.close()


def tensor_payload(backend, version: int, index: int, transport: str) -> str:
    return _STAGED[version].payload(index, transport)


def tensor_done(backend, version: int, index: int) -> None:
    staged = _STAGED.get(version)
    if staged is not None:
        staged.done(index)


def open_group(backend, name: str, world_size: int, kind: str, timeout_s: float) -> tuple[str, int]:
    """Start rank 0's store and form the group in the background (the servers join meanwhile)."""
    import threading

    from kbencheval.llm.weight_transfer import WeightGroup

    address = ray.util.get_node_ip_address()
    store = WeightGroup.master_store(address, timeout_s)

    def form() -> None:
        try:
            _GROUPS[name] = WeightGroup.join(address, store.port, 0, world_size, kind, name, timeout_s, store=store)
        except Exception as exc:  # group_ready reports it
            _GROUPS[name] = exc

    _GROUPS[name] = threading.Thread(target=form, daemon=True)
    _GROUPS[name].start()
    return address, store.port


def group_ready(backend, name: str, timeout_s: float) -> None:
    import threading

    from kbencheval.llm.weight_transfer import WeightGroup

    pending = _GROUPS.get(name)
    if isinstance(pending, threading.Thread):
        pending.join(timeout_s)
    group = _GROUPS.get(name)
    if not isinstance(group, WeightGroup):
        _GROUPS.pop(name, None)
        raise RuntimeError(f"weight update group {name!r} did not form within {timeout_s:g}s: {group!r}")


def broadcast_bucket(backend, name: str, version: int, bucket: list) -> None:
    state = _STAGED[version].state
    _GROUPS[name].send([state[n] for n, _, _ in bucket])


def close_group(backend, name: str) -> None:
    from kbencheval.llm.weight_transfer import WeightGroup

    group = _GROUPS.pop(name, None)
    if isinstance(group, WeightGroup):
        group.close()


# ---- trainer-side sinks (run on the driver, in sync_weights) ----
@dataclasses.dataclass(frozen=True)
class StagedPlan:
    """What an engine needs to pull version `version` from the trainer's rank 0."""

    sender: Any  # rank 0's TrainRank handle
    version: int
    buckets: list
    backend: str  # distributed: the group's backend
    cuda: bool = False  # rank 0 holds a GPU: cuda_ipc is possible
    host_id: str = ""  # rank 0's host (weight_transfer.host_id)
    node_ip: str = ""


@dataclasses.dataclass
class StagedWeightsSink:
    """Rank 0 stages the weights at pack and drops them at release (every engine has them)."""

    bucket_bytes: int
    sender: Any = None

    def pack(self, trainer, version: int) -> StagedPlan:
        plans = trainer.run_on_ranks(stage_weights, version, self.bucket_bytes)
        self.sender, p = trainer.workers[0], plans[0]
        return StagedPlan(self.sender, version, p["buckets"], p["backend"], p.get("cuda", False),
                          p.get("host_id", ""), p.get("node_ip", ""))

    def release(self, version: int) -> None:
        ray.get(self.sender.run.remote(unstage_weights, version), timeout=60)


class TensorWeights(StagedWeightsSink):
    """rollout.sglang_weight_sync=tensor: engines pull payloads bucket by bucket (TensorPusher)."""


class DistributedWeights(StagedWeightsSink):
    """rollout.sglang_weight_sync=distributed: engines have rank 0 broadcast bucket by bucket (DistributedPuller)."""


# ---- engine side (run inside SGLangEngineActor) ----
def post(url: str, body: dict | None, timeout_s: float, what: str, data: bytes | None = None) -> dict:
    """POST (body as JSON, or data: JSON already encoded) and return the reply; RuntimeError (with the
    server's message) unless success is true."""
    try:
        if data is None:
            resp = requests.post(url, json=body, timeout=timeout_s)
        else:
            resp = requests.post(url, data=data, timeout=timeout_s, headers={"Content-Type": "application/json"})
        reply = resp.json()
    except (requests.RequestException, ValueError) as exc:
        raise RuntimeError(f"{url} failed ({exc.__class__.__name__}: {exc}); is the server still up?") from None
    if not resp.ok or not reply.get("success"):
        message = reply.get("message") or (reply.get("error") or {}).get("message") or resp.text[:300]
        raise RuntimeError(f"{url} refused {what} (HTTP {resp.status_code}): {message}")
    return reply


def tensor_body(payload: str, flush_cache: bool, version: int) -> bytes:
    """SGLang's UpdateWeightsFromTensorReqInput fields for one payload (one tensor-parallel rank). A
    base64 payload needs no JSON escaping, so it is spliced in rather than scanned by json.dumps."""
    head = json.dumps({"load_format": None, "flush_cache": flush_cache, "weight_version": str(version)})
    quoted = json.dumps(payload) if payload[:1] == "{" else f'"{payload}"'
    return f'{head[:-1]}, "serialized_named_tensors": [{quoted}]}}'.encode("ascii")


def post_tensor_bucket(base_url: str, payload: str, flush_cache: bool, version: int, timeout_s: float,
                       what: str) -> dict:
    return post(f"{base_url}/update_weights_from_tensor", None, timeout_s, what,
                data=tensor_body(payload, flush_cache, version))


def pick_transport(base_url: str, plan: StagedPlan, timeout_s: float = 10.0) -> str:
    """cuda_ipc, shm or bytes for this server. kbench serve lists what it accepts and its host in /health
    (verified here); for any other server (SGLang, whose /health has no body) cuda_ipc when rank 0 has a
    GPU and the URL is rank 0's node, as SGLang's colocated setups do (written per SGLang's docs, not run
    against a real SGLang server), else bytes."""
    try:
        info = requests.get(f"{base_url}/health", timeout=timeout_s).json()
    except (requests.RequestException, ValueError):
        info = None
    offered = info.get("weight_transports") if isinstance(info, dict) else None
    if isinstance(offered, list):
        same = bool(plan.host_id) and info.get("host_id") == plan.host_id
        for transport in ("cuda_ipc", "shm"):
            if same and transport in offered and (transport != "cuda_ipc" or plan.cuda):
                return transport
        return "bytes"
    host = urllib.parse.urlsplit(base_url).hostname or ""
    local = host in ("127.0.0.1", "localhost", "::1") and ray.util.get_node_ip_address() == plan.node_ip
    return "cuda_ipc" if plan.cuda and (local or host == plan.node_ip) else "bytes"


class TensorPusher:
    """One engine's half of tensor sync: per bucket, a payload from rank 0, POSTed to the server."""

    def __init__(self, base_url: str, timeout_s: float, transport: str = "auto"):
        if transport not in ("auto", "cuda_ipc", "shm", "bytes"):
            raise ValueError(f"tensor transport {transport!r}: one of auto, cuda_ipc, shm, bytes")
        self.base_url, self.timeout_s, self.transport, self.last = base_url, timeout_s, transport, ""

    def push(self, plan: StagedPlan, version: int) -> None:
        transport = self.transport if self.transport != "auto" else pick_transport(self.base_url, plan)
        self.last, n, sender = transport, len(plan.buckets), plan.sender
        pending = {0: sender.run.remote(tensor_payload, plan.version, 0, transport)} if n else {}
        try:
            for i in range(n):
                payload = ray.get(pending[i], timeout=self.timeout_s)
                if i + 1 < n:  # rank 0 prepares the next bucket while the server loads this one
                    pending[i + 1] = sender.run.remote(tensor_payload, plan.version, i + 1, transport)
                try:
                    post_tensor_bucket(self.base_url, payload, i == n - 1, version, self.timeout_s,
                                       f"bucket {i + 1}/{n} of version {version} ({transport})")
                finally:
                    del pending[i], payload
                    if transport == "cuda_ipc":  # the server answered (its copy is done): rank 0 may free it
                        sender.run.remote(tensor_done, plan.version, i)
        finally:
            for i in pending if transport == "cuda_ipc" else ():  # a prefetched bucket nobody will send
                sender.run.remote(tensor_done, plan.version, i)  # runs after its payload call (actor order)


def push_tensors(base_url: str, state_dict: dict, version: int, bucket_bytes: int, timeout_s: float,
                 transport: str = "bytes") -> None:
    """Push a state dict held by this process (no trainer, no Ray), bucket by bucket."""
    staged = StagedWeights(state_dict, bucket_bytes)
    try:
        for i in range(len(staged.buckets)):
            post_tensor_bucket(base_url, staged.payload(i, transport), i == len(staged.buckets) - 1, version,
                               timeout_s, f"bucket {i + 1}/{len(staged.buckets)} of version {version}")
            staged.done(i)
    finally:
        staged.close()


class DistributedPuller:
    """One engine's end of its group with the trainer's rank 0: formed on the first push, torn down by close."""

    def __init__(self, base_url: str, timeout_s: float):
        self.base_url, self.timeout_s = base_url, timeout_s
        self.sender, self.name = None, ""

    def _open(self, plan: StagedPlan) -> None:
        name = f"kbench-weights-{uuid.uuid4().hex[:12]}"
        address, port = ray.get(plan.sender.run.remote(open_group, name, 2, plan.backend, self.timeout_s),
                                timeout=self.timeout_s)
        self.sender, self.name = plan.sender, name
        body = {"master_address": address, "master_port": port, "rank_offset": 1, "world_size": 2,
                "group_name": name, "backend": plan.backend}
        post(f"{self.base_url}/init_weights_update_group", body, self.timeout_s, f"group {name}")
        ray.get(plan.sender.run.remote(group_ready, name, self.timeout_s), timeout=self.timeout_s + 30)

    def push(self, plan: StagedPlan, version: int) -> None:
        try:
            if self.sender is None:
                self._open(plan)
            for i, bucket in enumerate(plan.buckets):
                sent = plan.sender.run.remote(broadcast_bucket, self.name, plan.version, bucket)
                names, dtypes, shapes = (list(col) for col in zip(*bucket))
                body = {"names": names, "dtypes": dtypes, "shapes": shapes, "group_name": self.name,
                        "flush_cache": i == len(plan.buckets) - 1, "weight_version": str(version)}
                post(f"{self.base_url}/update_weights_from_distributed", body, self.timeout_s,
                     f"bucket {i + 1}/{len(plan.buckets)} of version {version}")
                ray.get(sent, timeout=self.timeout_s)
        except Exception:
            self.close()  # a half-done broadcast leaves the group out of step: form a new one next time
            raise

    def close(self) -> None:
        """Destroy the group on the server and on rank 0 (best effort: either may be gone already)."""
        if self.sender is None:
            return
        sender, name, self.sender, self.name = self.sender, self.name, None, ""
        try:
            requests.post(f"{self.base_url}/destroy_weights_update_group", json={"group_name": name}, timeout=10)
        except requests.RequestException:
            pass
        try:
            ray.get(sender.run.remote(close_group, name), timeout=30)
        except Exception:  # the trainer already exited: its half of the group went with it
            pass
