"""Weight sync to SGLang servers without disk: rollout.sglang_weight_sync = tensor | distributed.

    smart rl configs/rl_tiny_cpu.yaml rollout.engine=sglang "rollout.sglang_urls=[...]" rollout.sglang_weight_sync=tensor

tensor: `TensorWeights.pack` leaves the trainer's rank-0 state dict in the Ray object store; each engine
actor cuts it into buckets of at most rollout.weight_bucket_mb and POSTs each to its server's
/update_weights_from_tensor (SGLang's fields; payload: kbencheval.llm.weight_transfer). The tensors
travel by value over HTTP, so the engine actor and the server should share a machine.

distributed: `DistributedWeights.pack` has every trainer rank gather the full state dict, rank 0 keeps
it (its process, `_STAGED`) and returns the bucket plan (names, dtypes, shapes). Each engine then forms
its own two-rank group with the trainer's rank 0 (POST /init_weights_update_group; gloo on CPU, nccl
when the trainer has a GPU) once, and for each bucket asks rank 0 to broadcast it while it POSTs the
names, dtypes and shapes to /update_weights_from_distributed. NCCL refuses two ranks on one GPU, so a
server sharing the trainer's GPU needs disk or tensor. One group per server (not one for all):
the Engine protocol does not tell the sink which servers are alive, and a dropped server then breaks
only its own group. `retire` (a dropped server) and `close` (the end of the run) destroy the group on
both sides. Every HTTP call, group join and broadcast has a timeout (rollout.sglang_timeout_s).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import ray
import requests

# ---- rank 0 of the trainer: these run inside its TrainWorker (TrainWorker.run), state kept per process ----
_STAGED: dict[int, dict] = {}  # version -> full state dict, until every engine has it
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


def stage_weights(backend, version: int, bucket_bytes: int) -> dict:
    """Every rank joins the gather; rank 0 keeps the weights and returns the plan (others: no buckets).
    In the compute dtype, as export_hf writes them for the disk path (bf16 on GPUs: half the bytes)."""
    import torch

    state = backend.state_dict_for_sync(getattr(backend, "compute_dtype", None))
    if not state:
        return {"buckets": [], "backend": ""}
    _STAGED.clear()  # one version at a time: the previous sync finished before this one started
    _STAGED[version] = state
    return {"buckets": bucket_plan(state, bucket_bytes), "backend": "nccl" if torch.cuda.is_available() else "gloo"}


def unstage_weights(backend, version: int) -> None:
    _STAGED.pop(version, None)


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
    state = _STAGED[version]
    _GROUPS[name].send([state[n] for n, _, _ in bucket])


def close_group(backend, name: str) -> None:
    from kbencheval.llm.weight_transfer import WeightGroup

    group = _GROUPS.pop(name, None)
    if isinstance(group, WeightGroup):
        group.close()


# ---- trainer-side sinks (run on the driver, in sync_weights) ----
@dataclasses.dataclass(frozen=True)
class TensorWeights:
    """Rank 0's state dict, left in the object store; each engine serializes and POSTs it in buckets."""

    def pack(self, trainer, version: int):
        return trainer.weights_ref()

    def release(self, version: int) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class DistributedPlan:
    """What an engine needs to pull version `version` over its group with the trainer's rank 0."""

    sender: Any  # rank 0's TrainWorker handle
    version: int
    buckets: list
    backend: str


@dataclasses.dataclass
class DistributedWeights:
    bucket_bytes: int
    sender: Any = None

    def pack(self, trainer, version: int) -> DistributedPlan:
        plans = trainer.run_on_ranks(stage_weights, version, self.bucket_bytes)
        self.sender = trainer.workers[0]
        return DistributedPlan(self.sender, version, plans[0]["buckets"], plans[0]["backend"])

    def release(self, version: int) -> None:
        """Every engine has the version: rank 0 drops its staged copy."""
        ray.get(self.sender.run.remote(unstage_weights, version), timeout=60)


# ---- engine side (run inside SGLangEngineActor) ----
def post(url: str, body: dict, timeout_s: float, what: str) -> dict:
    """POST and return the reply; RuntimeError (with the server's message) unless success is true."""
    try:
        resp = requests.post(url, json=body, timeout=timeout_s)
        reply = resp.json()
    except (requests.RequestException, ValueError) as exc:
        raise RuntimeError(f"{url} failed ({exc.__class__.__name__}: {exc}); is the server still up?") from None
    if not resp.ok or not reply.get("success"):
        message = reply.get("message") or (reply.get("error") or {}).get("message") or resp.text[:300]
        raise RuntimeError(f"{url} refused {what} (HTTP {resp.status_code}): {message}")
    return reply


def push_tensors(base_url: str, state_dict: dict, version: int, bucket_bytes: int, timeout_s: float) -> None:
    from kbencheval.llm.weight_transfer import serialize_named_tensors

    buckets = bucket_plan(state_dict, bucket_bytes)
    for i, bucket in enumerate(buckets):
        payload = serialize_named_tensors([(n, state_dict[n]) for n, _, _ in bucket])
        body = {"serialized_named_tensors": [payload], "load_format": None, "flush_cache": i == len(buckets) - 1,
                "weight_version": str(version)}
        post(f"{base_url}/update_weights_from_tensor", body, timeout_s, f"bucket {i + 1}/{len(buckets)} of version {version}")


class DistributedPuller:
    """One engine's end of its group with the trainer's rank 0: formed on the first push, torn down by close."""

    def __init__(self, base_url: str, timeout_s: float):
        self.base_url, self.timeout_s = base_url, timeout_s
        self.sender, self.name = None, ""

    def _open(self, plan: DistributedPlan) -> None:
        name = f"kbench-weights-{uuid.uuid4().hex[:12]}"
        address, port = ray.get(plan.sender.run.remote(open_group, name, 2, plan.backend, self.timeout_s),
                                timeout=self.timeout_s)
        self.sender, self.name = plan.sender, name
        body = {"master_address": address, "master_port": port, "rank_offset": 1, "world_size": 2,
                "group_name": name, "backend": plan.backend}
        post(f"{self.base_url}/init_weights_update_group", body, self.timeout_s, f"group {name}")
        ray.get(plan.sender.run.remote(group_ready, name, self.timeout_s), timeout=self.timeout_s + 30)

    def push(self, plan: DistributedPlan, version: int) -> None:
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
