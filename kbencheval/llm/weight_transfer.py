"""Weight transfer without disk, both halves: serialized named tensors and a broadcast process group.

    payload = serialize_named_tensors([("lm_head.weight", w)])          # trainer side (a str for JSON)
    named = deserialize_named_tensors(payload)                           # server side: [(name, tensor)]
    group = WeightGroup.join("10.0.0.1", 29600, rank=1, world_size=2, backend="gloo", group_name="g")
    tensors = group.receive([("w", "float32", [4, 4])])                  # rank 0 broadcasts, others receive

Used by `kbench serve`'s SGLang-compatible weight routes (kbencheval.llm.serve_weights) and by smart's
SGLang engine (smart.rollout.engines.weight_sync). The request fields follow SGLang's io_struct.

Serialization is SGLang's scheme: base64 of a pickle of [(name, tensor), ...]. CUDA tensors pickled with
torch's multiprocessing reductions become CUDA IPC handles (same node and GPU as the server); CPU tensors
are pickled by value (torch's CPU reductions need shared memory the two processes cannot agree on over
HTTP). Unpickling runs code from the sender, so the route is for a trusted trainer on the same machine,
as SGLang's is.

A group is a torch.distributed process group of its own (a TCPStore plus a Gloo or NCCL group), never the
default group, so a trainer that already uses torch.distributed for FSDP is not disturbed. Every store
operation and collective has a timeout.
"""

from __future__ import annotations

import base64
import datetime
import io
import pickle

import torch


def serialize_named_tensors(named: list[tuple[str, torch.Tensor]]) -> str:
    """base64(pickle([(name, tensor), ...])); CUDA tensors as IPC handles, CPU tensors by value."""
    buf = io.BytesIO()
    if any(t.is_cuda for _, t in named):
        from torch.multiprocessing.reductions import ForkingPickler  # registers torch's CUDA IPC reductions

        ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(named)
    else:
        pickle.dump(named, buf, pickle.HIGHEST_PROTOCOL)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def deserialize_named_tensors(payload: str | bytes) -> list[tuple[str, torch.Tensor]]:
    """The inverse of serialize_named_tensors; raises ValueError on anything but [(str, Tensor), ...]."""
    import torch.multiprocessing  # noqa: F401  (CUDA IPC handles rebuild through its reductions)

    try:
        named = pickle.loads(base64.b64decode(payload))
    except Exception as exc:
        raise ValueError(f"serialized_named_tensors is not a base64 pickle of [(name, tensor)]: "
                         f"{exc.__class__.__name__}: {exc}") from None
    if not (isinstance(named, list) and all(isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str)
                                            and isinstance(p[1], torch.Tensor) for p in named)):
        raise ValueError("serialized_named_tensors must decode to a list of (name, tensor) pairs")
    return [(name, tensor) for name, tensor in named]


def parse_dtype(name: str) -> torch.dtype:
    """'bfloat16' or 'torch.bfloat16' -> torch.bfloat16; ValueError otherwise."""
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; send torch dtype names such as float32 or bfloat16")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class WeightGroup:
    """One weight-update process group: rank 0 (the trainer) broadcasts, every other rank (a server) receives."""

    def __init__(self, store, pg, rank: int, world_size: int, backend: str, timeout_s: float, device: torch.device):
        self.store, self.pg, self.rank, self.world_size = store, pg, rank, world_size
        self.backend, self.timeout, self.device = backend, datetime.timedelta(seconds=timeout_s), device

    @classmethod
    def master_store(cls, host: str, timeout_s: float):
        """Rank 0's TCPStore on a free port (read it from .port); start it before the servers join."""
        import torch.distributed as dist

        return dist.TCPStore(host, 0, None, True, datetime.timedelta(seconds=timeout_s), wait_for_workers=False)

    @classmethod
    def join(cls, master_address: str, master_port: int, rank: int, world_size: int, backend: str,
             group_name: str, timeout_s: float = 120.0, store=None, device: str | None = None) -> "WeightGroup":
        """Join (rank > 0) or form (rank 0, with its master_store) the group; blocks until all ranks joined
        or timeout_s passed (then raises). device: where tensors are broadcast from or received into (nccl:
        this process's GPU, default the current one; NCCL refuses two ranks on one GPU)."""
        import torch.distributed as dist

        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend={backend!r}: use gloo (CPU) or nccl (GPU)")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside a world of {world_size}")
        if backend == "nccl" and (not torch.cuda.is_available() or (device and torch.device(device).type != "cuda")):
            raise ValueError("backend=nccl needs this process on a GPU (kbench serve --device cuda); use gloo on CPU")
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(master_address, int(master_port), None, False, timeout)
        prefixed = dist.PrefixStore(f"weights/{group_name}", store)
        if backend == "nccl":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            pg = dist.ProcessGroupNCCL(prefixed, rank, world_size, opts)
        else:
            pg = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
        where = torch.device(device or ("cuda" if backend == "nccl" else "cpu"))
        if where.type == "cuda" and where.index is None:
            where = torch.device("cuda", torch.cuda.current_device())
        return cls(store, pg, rank, world_size, backend, timeout_s, where)

    def _broadcast(self, tensor: torch.Tensor) -> None:
        import torch.distributed as dist

        self.pg.broadcast([tensor], dist.BroadcastOptions()).wait(self.timeout)

    def send(self, tensors: list[torch.Tensor]) -> None:
        """Rank 0: broadcast each tensor (moved to this group's device) in order."""
        for t in tensors:
            self._broadcast(t.detach().to(self.device).contiguous())
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def receive(self, specs: list[tuple[str, str, list[int]]]) -> list[tuple[str, torch.Tensor]]:
        """Rank > 0: receive one fresh tensor per (name, dtype, shape), in the sender's order."""
        shaped = [(name, parse_dtype(dtype), [int(s) for s in shape]) for name, dtype, shape in specs]
        out = []
        for name, dtype, shape in shaped:
            t = torch.empty(shape, dtype=dtype, device=self.device)
            self._broadcast(t)
            out.append((name, t))
        return out

    def close(self) -> None:
        """Tear the group down (idempotent); a peer that still waits on it times out."""
        pg, self.pg = self.pg, None
        if pg is not None:
            try:
                pg.shutdown() if hasattr(pg, "shutdown") else pg.abort()
            except Exception:  # a group whose peer already died: nothing left to release cleanly
                pass
        self.store = None
