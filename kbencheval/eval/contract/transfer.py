"""Move output tensors from a candidate worker to the judge without pickle.

The candidate process is untrusted, so nothing it sends is unpickled. On CUDA the judge maps the
candidate's output memory through CUDA IPC (no copy); descriptors are plain JSON. On CPU the worker
writes each output's raw bytes to one file and the judge rebuilds the tensors from them.

No method of the candidate's output objects runs on the way (`plain_outputs`, `export_tensors`): only
exact `torch.Tensor`s cross, read through torch's C functions captured when this module was imported,
before any candidate code, with torch-function handling off. A Tensor subclass, a tuple subclass or a
patched `torch.Tensor` method could otherwise compute the answer after the checks, as it is read.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import torch

# Captured before any candidate is imported: a candidate can rebind torch.Tensor's methods, not these.
_TB, _STORAGE = torch._C.TensorBase, torch._C.StorageBase
_DETACH, _CONTIGUOUS, _RESHAPE, _VIEW, _NUMPY = _TB.detach, _TB.contiguous, _TB.reshape, _TB.view, _TB.numpy
_RESOLVE_CONJ, _RESOLVE_NEG, _UNTYPED_STORAGE = _TB.resolve_conj, _TB.resolve_neg, _TB.untyped_storage
_LAYOUT, _DEVICE, _DTYPE, _SHAPE = _TB.layout.__get__, _TB.device.__get__, _TB.dtype.__get__, _TB.shape.__get__
_DATA_PTR, _NBYTES = _STORAGE.data_ptr, _STORAGE.nbytes
_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_FUNCTION_MODES, _DISPATCH_MODES = torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack
_TENSOR, _PARAMETER, _STRIDED, _UINT8 = torch.Tensor, torch.nn.Parameter, torch.strided, torch.uint8
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128, torch.int64,
    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}


class NotPlainOutput(ValueError):
    """forward returned something other than plain dense tensors (the worker rejects the candidate)."""


def modes() -> tuple[int, int]:
    """How many torch-function and dispatch modes are active: forward must leave them as it found them."""
    return _FUNCTION_MODES(), _DISPATCH_MODES()


def plain_outputs(out, modes_before: tuple[int, int] = (0, 0)) -> list[torch.Tensor]:
    """forward's return value as a list of plain dense tensors, decided from exact types alone, before any
    method of it runs: a tuple or list (exactly those types) of exact `torch.Tensor`s (an exact
    `nn.Parameter` is taken as its plain data), or one such tensor. Raises NotPlainOutput otherwise, or
    when forward left a torch-function or dispatch mode active (it would see every later read)."""
    if modes() != modes_before:
        raise NotPlainOutput("forward left a torch function or dispatch mode active")
    items = list(out) if type(out) is tuple or type(out) is list else [out]
    plain = []
    with _NO_TORCH_FUNCTION():
        for i, t in enumerate(items):
            if type(t) is not _TENSOR and type(t) is not _PARAMETER:
                raise NotPlainOutput(f"output {i} is not a plain torch.Tensor (a Tensor subclass or another "
                                     "object): return the tensors your kernels wrote")
            t = _DETACH(t)
            if _LAYOUT(t) is not _STRIDED:
                raise NotPlainOutput(f"output {i} is not a dense (strided) tensor")
            plain.append(t)
    return plain


def storage_range(t: torch.Tensor) -> tuple[int, int]:
    """Where a plain tensor's storage lies (torch's own functions, whatever the candidate rebound)."""
    with _NO_TORCH_FUNCTION():
        storage = _UNTYPED_STORAGE(t)
        return _DATA_PTR(storage), _DATA_PTR(storage) + _NBYTES(storage)


def _raw_bytes(t: torch.Tensor) -> bytes:
    with _NO_TORCH_FUNCTION():
        flat = _RESHAPE(_CONTIGUOUS(_RESOLVE_NEG(_RESOLVE_CONJ(t))), (-1,))
        return _NUMPY(_VIEW(flat, _UINT8)).tobytes()


def _b64(x):
    return base64.b64encode(x).decode() if isinstance(x, (bytes, bytearray)) else x


def _unb64(x):
    return base64.b64decode(x) if isinstance(x, str) else x


def export_tensors(tensors: list[torch.Tensor], folder: str, tag: str) -> dict:
    """`tensors`: plain_outputs' list (exact torch.Tensors)."""
    if not tensors or _DEVICE(tensors[0]).type == "cpu":
        path = str(Path(folder) / f"{tag}.raw")
        items = []
        with open(path, "wb") as f:
            for t in tensors:
                data = _raw_bytes(t)
                f.write(data)
                items.append({"dtype": str(_DTYPE(t)).removeprefix("torch."), "shape": list(_SHAPE(t)),
                              "nbytes": len(data)})
        return {"kind": "raw", "path": path, "tensors": items}
    from torch.multiprocessing.reductions import reduce_tensor

    items = []
    for t in tensors:
        with _NO_TORCH_FUNCTION():
            t = _DETACH(t)
        _, args = reduce_tensor(t)
        (_, size, stride, offset, _, dtype, device, handle, size_bytes, offset_bytes, _,
         rc_handle, rc_offset, ev_handle, ev_sync) = args
        items.append({
            "size": list(size), "stride": list(stride), "offset": offset, "dtype": str(dtype).removeprefix("torch."),
            "device": device, "handle": _b64(handle), "size_bytes": size_bytes, "offset_bytes": offset_bytes,
            "rc_handle": _b64(rc_handle), "rc_offset": rc_offset, "ev_handle": _b64(ev_handle), "ev_sync": ev_sync,
        })
    return {"kind": "cuda_ipc", "tensors": items}


def import_tensors(desc: dict, allowed_folder: str) -> list[torch.Tensor]:
    if desc.get("kind") == "raw":
        return _read_raw(desc, allowed_folder)
    if desc.get("kind") == "cuda_ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        out = []
        for d in desc["tensors"]:
            dtype = getattr(torch, d["dtype"])
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"bad dtype {d['dtype']}")
            out.append(rebuild_cuda_tensor(
                torch.Tensor, torch.Size(d["size"]), tuple(d["stride"]), int(d["offset"]), torch.UntypedStorage,
                dtype, int(d["device"]), _unb64(d["handle"]), int(d["size_bytes"]), int(d["offset_bytes"]), False,
                _unb64(d["rc_handle"]), int(d["rc_offset"]), _unb64(d["ev_handle"]), bool(d["ev_sync"]),
            ))
        return out
    raise ValueError(f"unknown output transfer kind {str(desc.get('kind'))[:40]!r}")


def _read_raw(desc: dict, allowed_folder: str) -> list[torch.Tensor]:
    """The tensors of a raw output file, each checked against its declared dtype and shape; the file must
    hold exactly their bytes, and is read no further than its size when opened."""
    # Directly in the job folder (which the candidate cannot replace), its last component not followed
    # if the candidate swapped it for a symlink: the judge reads only what the candidate wrote.
    path = Path(allowed_folder).resolve() / Path(str(desc.get("path"))).name
    if Path(str(desc.get("path"))).resolve() != path:
        raise ValueError("output file outside the job folder")
    specs = desc.get("tensors")
    if not isinstance(specs, list) or len(specs) > 64:
        raise ValueError("output file description is not a list of at most 64 tensors")
    layout = []
    for spec in specs:
        dtype = _DTYPES.get(str(spec.get("dtype")) if isinstance(spec, dict) else "")
        shape = spec.get("shape") if dtype is not None else None
        if not (isinstance(shape, list) and len(shape) <= 16 and all(type(n) is int and n >= 0 for n in shape)):
            raise ValueError("output file description has a bad dtype or shape")
        numel = 1
        for n in shape:
            numel *= n
        layout.append((dtype, shape, numel * dtype.itemsize))
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("output file is not a plain file")
        size = os.fstat(fd).st_size
        if size != sum(n for _, _, n in layout):
            raise ValueError("output file size does not match its tensors' shapes")
        data = bytearray(size)
        if f.readinto(data) != size:
            raise ValueError("output file changed while it was read")
    out, offset = [], 0
    for dtype, shape, nbytes in layout:
        chunk = torch.frombuffer(data, dtype=torch.uint8, count=nbytes, offset=offset) if nbytes else \
            torch.empty(0, dtype=torch.uint8)
        out.append(chunk.view(dtype).reshape(shape).clone())
        offset += nbytes
    return out
