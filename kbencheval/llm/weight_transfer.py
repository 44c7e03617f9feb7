"""Weight transfer without disk, both halves: tensor payloads for /update_weights_from_tensor and a
broadcast process group.

    payload = encode_bytes([("lm_head.weight", w)])                      # trainer side: a str for JSON
    named = deserialize_named_tensors(payload)                           # server side: [(name, tensor)]
    group = WeightGroup.join("10.0.0.1", 29600, rank=1, world_size=2, backend="gloo", group_name="g")
    tensors = group.receive([("w", "float32", [4, 4])])                  # rank 0 broadcasts, others receive

Used by `kbench serve`'s SGLang-compatible weight routes (kbencheval.llm.serve_weights) and by smart's
SGLang engine (smart.rollout.engines.weight_sync). The request fields follow SGLang's io_struct.

A payload (one entry of `serialized_named_tensors`) travels one of three ways:
- `cuda_ipc`: SGLang's scheme for a trainer on the server's host: base64 of torch's ForkingPickler output
  for [(name, cuda tensor)], i.e. CUDA IPC handles, not bytes. The sender keeps the memory alive until
  the server has answered. What SGLang's MultiprocessingSerializer sends for CUDA tensors.
- `bytes`: SGLang's scheme by value (base64 of a pickle of [(name, cpu tensor)]); works across hosts,
  costs base64 + JSON on both ends, the slowest path per GB (docs/training.md).
- `shm`: `kbench serve` only, not SGLang: a JSON manifest (starts with "{", which base64 never does)
  naming a file /dev/shm/kbench-weights-<hex> that the trainer wrote, with each tensor's dtype, shape and
  offset; the server maps the file and copies from it. Same host (host_id) and same user only.
Parsing is safe for data from the network: pickles go through `_WeightUnpickler`, which resolves only
the callables torch's tensor reductions emit (each checked, storages loaded with weights_only=True), so
a payload cannot run code; a manifest may name only a regular file matching the kbench-weights pattern.

A group is a torch.distributed process group of its own (a TCPStore plus a Gloo or NCCL group), never the
default group, so a trainer that already uses torch.distributed for FSDP is not disturbed. Every store
operation and collective has a timeout.
"""

from __future__ import annotations

import base64
import binascii
import collections
import datetime
import io
import json
import math
import mmap
import os
import pickle
import re
import stat
import uuid
import warnings

import torch

SHM_DIR = "/dev/shm"
_SHM_NAME = re.compile(r"kbench-weights-[0-9a-f]{32}")
_ALIGN = 64  # tensor offsets in a shm file: any dtype's view is aligned


def host_id() -> str:
    """Same kernel boot and same /dev/shm mount, which shm and CUDA IPC need ("" when unknown, e.g. no
    /dev/shm): equal on trainer and server means one host, not two containers with their own /dev/shm."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        st = os.stat(SHM_DIR)
    except OSError:
        return ""
    return f"{boot}:{st.st_dev}:{st.st_ino}"


def offered_transports(device) -> list[str]:
    """What a server on `device` accepts, best first (kbench serve's /health lists it)."""
    return (["cuda_ipc"] if torch.device(device).type == "cuda" else []) + (["shm"] if host_id() else []) + ["bytes"]


# ---- sender side ----
def encode_bytes(named: list[tuple[str, torch.Tensor]]) -> str:
    """SGLang's by-value payload: base64(pickle([(name, cpu tensor)])). A view would pickle its whole
    storage, so such tensors are copied first."""
    own = [(n, t if t.untyped_storage().nbytes() == t.nbytes and t.is_contiguous() else t.clone())
           for n, t in ((n, t.detach().cpu()) for n, t in named)]
    return base64.b64encode(pickle.dumps(own, pickle.HIGHEST_PROTOCOL)).decode("ascii")


def encode_cuda_ipc(named: list[tuple[str, torch.Tensor]]) -> str:
    """SGLang's MultiprocessingSerializer payload for CUDA tensors: base64(ForkingPickler) = IPC handles.
    The caller keeps the tensors alive until the server has answered; the server must number the GPU
    as the sender does (same CUDA_VISIBLE_DEVICES, as a colocated run has them)."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (its import registers torch's CUDA IPC reductions with ForkingPickler)

    if not all(t.is_cuda for _, t in named):
        raise ValueError("cuda_ipc sends CUDA tensors only")
    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump([(n, t.detach()) for n, t in named])
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _layout(named: list[tuple[str, torch.Tensor]]) -> tuple[list[int], int]:
    offsets, size = [], 0
    for _, t in named:
        offsets.append(size)
        size += -(-t.numel() * t.element_size() // _ALIGN) * _ALIGN
    return offsets, size


def write_shm(named: list[tuple[str, torch.Tensor]]) -> tuple[str, str]:
    """Write the tensors into a new /dev/shm file (mode 0600); returns (path, manifest payload). The caller
    unlinks the path once every server has loaded it."""
    offsets, size = _layout(named)
    size = max(size, 1)  # mmap refuses 0 bytes (a bucket of empty tensors)
    path = os.path.join(SHM_DIR, f"kbench-weights-{uuid.uuid4().hex}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as mm:
            flat = torch.frombuffer(mm, dtype=torch.uint8)
            for (_, t), off in zip(named, offsets):
                n = t.numel() * t.element_size()
                if n:
                    flat[off:off + n].copy_(t.detach().reshape(-1).view(torch.uint8))
            del flat  # the mapping closes only once no tensor views it
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    tensors = [[n, dtype_name(t.dtype), list(t.shape), off] for (n, t), off in zip(named, offsets)]
    return path, json.dumps({"kbench_shm": 1, "path": path, "size": size, "tensors": tensors})


def unlink_shm(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---- receiver side ----
def deserialize_named_tensors(payload: str | bytes) -> list[tuple[str, torch.Tensor]]:
    """One payload (any transport) -> [(name, tensor)]; ValueError with a one-line reason otherwise.
    shm tensors are read-only-intended views of a private mapping; cuda_ipc tensors live in the sender's
    memory: copy them before answering the sender."""
    if isinstance(payload, bytes):
        payload = payload.decode("ascii", errors="replace")
    if not isinstance(payload, str) or not payload:
        raise ValueError("serialized_named_tensors[0] must be a non-empty string")
    named = _from_manifest(payload) if payload.lstrip()[:1] == "{" else _from_pickle(payload)
    if not (isinstance(named, list) and named and all(
            isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], torch.Tensor)
            for p in named)):
        raise ValueError("serialized_named_tensors[0] must decode to a non-empty list of (name, tensor) pairs")
    return [(name, tensor) for name, tensor in named]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text}"[:300]


def _from_pickle(payload: str) -> list:
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII text
        raise ValueError(f"serialized_named_tensors[0] is neither base64 (SGLang's pickle) nor a kbench shm "
                         f"manifest: {_one_line(exc)}") from None
    try:
        with warnings.catch_warnings():  # torch's own "TypedStorage is deprecated", once per storage
            warnings.simplefilter("ignore", UserWarning)
            return _WeightUnpickler(io.BytesIO(raw)).load()
    except ValueError as exc:  # a checked argument (ours): its message is the reason
        raise ValueError(f"serialized_named_tensors[0] refused: {' '.join(str(exc).split())[:300]}") from None
    except Exception as exc:  # truncated or foreign pickle, a blocked global, a handle CUDA cannot open
        raise ValueError(f"serialized_named_tensors[0] is not a pickle of [(name, tensor)] this server "
                         f"accepts: {_one_line(exc)}") from None


def _from_manifest(payload: str) -> list:
    try:
        m = json.loads(payload)
    except ValueError as exc:
        raise ValueError(f"serialized_named_tensors[0] is not a valid kbench shm manifest: {_one_line(exc)}") from None
    if not (isinstance(m, dict) and m.get("kbench_shm") == 1 and isinstance(m.get("path"), str)
            and _count(m.get("size")) > 0 and isinstance(m.get("tensors"), list) and m["tensors"]):
        raise ValueError("a kbench shm manifest needs kbench_shm: 1, path, size > 0 and a non-empty tensors list")
    folder, name = os.path.split(m["path"])
    if folder != SHM_DIR or not _SHM_NAME.fullmatch(name):
        raise ValueError(f"shm path {m['path'][:120]!r} refused: only {SHM_DIR}/kbench-weights-<32 hex> files are read")
    try:
        fd = os.open(m["path"], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ValueError(f"cannot open {m['path']} ({exc.strerror}): the trainer and the server must share a host, "
                         "/dev/shm and user for transport shm; use bytes otherwise") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < m["size"]:
            raise ValueError(f"{m['path']} is not a regular file of at least {m['size']} bytes")
        mm = mmap.mmap(fd, m["size"], access=mmap.ACCESS_COPY)  # private: the server never writes the trainer's file
    finally:
        os.close(fd)
    flat = torch.frombuffer(mm, dtype=torch.uint8)  # the tensors keep the mapping alive
    named = []
    for spec in m["tensors"]:
        if not (isinstance(spec, list) and len(spec) == 4 and isinstance(spec[0], str) and isinstance(spec[2], list)
                and all(_count(d) >= 0 for d in spec[2]) and _count(spec[3]) >= 0):
            raise ValueError(f"bad tensor entry {str(spec)[:120]}: want [name, dtype, shape, offset]")
        name, dtype, shape, offset = spec
        dtype = parse_dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if offset % dtype.itemsize or offset + nbytes > m["size"]:
            raise ValueError(f"{name}: offset {offset} and {nbytes} bytes do not fit the {m['size']}-byte segment")
        named.append((name, flat[offset:offset + nbytes].view(dtype).view(shape)))
    return named


def _count(x) -> int:
    """x if it is a non-negative int (not a bool), else -1."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else -1


def _load_storage(data: bytes):
    """torch.storage._load_from_bytes without its weights_only=False: a storage's bytes, nothing else."""
    if not isinstance(data, bytes):
        raise ValueError("a storage must be bytes")
    return torch.load(io.BytesIO(data), weights_only=True)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None):
    """torch's by-value rebuild, refusing a view outside its storage (torch would grow the storage with
    uninitialized memory) and any hooks or metadata."""
    if not (isinstance(storage, torch.storage.TypedStorage) and isinstance(size, (tuple, list))
            and isinstance(stride, (tuple, list)) and len(size) == len(stride)
            and all(_count(d) >= 0 for d in (storage_offset, *size, *stride))
            and not backward_hooks and metadata in (None, {})):
        raise ValueError("a by-value tensor has unexpected rebuild arguments")
    end = storage_offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1 if all(size) else 0
    if end > storage.size():
        raise ValueError(f"a by-value tensor reaches element {end} of a {storage.size()}-element storage")
    return torch._utils._rebuild_tensor_v2(storage, storage_offset, tuple(size), tuple(stride), False,
                                           collections.OrderedDict())


_CUDA_ARGS = 15  # torch.multiprocessing.reductions.rebuild_cuda_tensor's arguments (torch 2.x)


def _rebuild_cuda_tensor(*args):
    """torch's rebuild_cuda_tensor, with every argument's type checked first (the handle bytes themselves
    can only name CUDA memory of this host, which CUDA checks)."""
    from torch.multiprocessing import reductions

    if len(args) != _CUDA_ARGS:
        raise ValueError(f"a CUDA IPC tensor with {len(args)} rebuild arguments (this torch expects {_CUDA_ARGS}): "
                         "trainer and server need the same torch version")
    (tensor_cls, size, stride, offset, storage_cls, dtype, device, handle, storage_bytes, storage_offset,
     _requires_grad, ref_handle, ref_offset, event_handle, event_sync) = args
    ints = (offset, storage_bytes, storage_offset, ref_offset, *size, *stride)
    if not (tensor_cls in (torch.Tensor, torch.nn.Parameter) and storage_cls in _STORAGES
            and isinstance(dtype, torch.dtype) and all(_count(i) >= 0 for i in ints)
            and isinstance(handle, bytes) and isinstance(ref_handle, bytes)
            and (event_handle is None or isinstance(event_handle, bytes)) and isinstance(event_sync, bool)):
        raise ValueError("a CUDA IPC tensor has unexpected rebuild arguments")
    if not torch.cuda.is_available():
        raise ValueError("CUDA IPC handles need a server on a GPU of the trainer's host (kbench serve --device cuda)")
    device = _cuda_index(device)
    return reductions.rebuild_cuda_tensor(torch.Tensor, torch.Size(size), tuple(stride), offset, storage_cls, dtype,
                                          device, handle, storage_bytes, storage_offset, False, ref_handle,
                                          ref_offset, event_handle, event_sync)


def _cuda_index(device) -> int:
    """The sender's device: an index (stock torch) or a GPU UUID string (SGLang's patched reductions)."""
    if isinstance(device, int) and not isinstance(device, bool) and 0 <= device < torch.cuda.device_count():
        return device
    if isinstance(device, str):
        for i in range(torch.cuda.device_count()):
            if str(torch.cuda.get_device_properties(i).uuid) == device:
                return i
    raise ValueError(f"CUDA IPC device {str(device)[:60]!r} is not a GPU this server sees")


_STORAGES = (torch.storage.TypedStorage, torch.UntypedStorage)
_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch.storage", "_load_from_bytes"): _load_storage,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"): _rebuild_cuda_tensor,
    ("torch", "Tensor"): torch.Tensor,
    ("torch._tensor", "Tensor"): torch.Tensor,
    ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    ("torch", "Size"): torch.Size,
    ("torch.storage", "TypedStorage"): torch.storage.TypedStorage,
    ("torch.storage", "UntypedStorage"): torch.UntypedStorage,
    ("torch", "UntypedStorage"): torch.UntypedStorage,
}


class _WeightUnpickler(pickle.Unpickler):
    """Resolves only what torch's tensor pickles name (above) and torch dtypes; anything else, such as
    os.system or builtins.eval, is refused before it is called."""

    def find_class(self, module: str, name: str):
        found = _ALLOWED.get((module, name))
        if found is None and module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            found = getattr(torch, name)
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a weight payload")
        return found


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
