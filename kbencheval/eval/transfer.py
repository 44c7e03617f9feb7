"""Move output tensors from a candidate worker to the judge without pickle.

The candidate process is untrusted, so nothing it sends is unpickled. On CUDA the judge maps the
candidate's output memory through CUDA IPC (no copy); descriptors are plain JSON. On CPU the
candidate saves tensors with torch.save and the judge reads them with `weights_only=True`.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import torch


def _b64(x):
    return base64.b64encode(x).decode() if isinstance(x, (bytes, bytearray)) else x


def _unb64(x):
    return base64.b64decode(x) if isinstance(x, str) else x


def export_tensors(tensors: list[torch.Tensor], folder: str, tag: str) -> dict:
    if not tensors or tensors[0].device.type == "cpu":
        path = str(Path(folder) / f"{tag}.pt")
        torch.save([t.detach().contiguous() for t in tensors], path)
        return {"kind": "file", "path": path}
    from torch.multiprocessing.reductions import reduce_tensor

    items = []
    for t in tensors:
        _, args = reduce_tensor(t.detach())
        (_, size, stride, offset, _, dtype, device, handle, size_bytes, offset_bytes, _,
         rc_handle, rc_offset, ev_handle, ev_sync) = args
        items.append({
            "size": list(size), "stride": list(stride), "offset": offset, "dtype": str(dtype).removeprefix("torch."),
            "device": device, "handle": _b64(handle), "size_bytes": size_bytes, "offset_bytes": offset_bytes,
            "rc_handle": _b64(rc_handle), "rc_offset": rc_offset, "ev_handle": _b64(ev_handle), "ev_sync": ev_sync,
        })
    return {"kind": "cuda_ipc", "tensors": items}


def import_tensors(desc: dict, allowed_folder: str) -> list[torch.Tensor]:
    if desc.get("kind") == "file":
        # Directly in the job folder (which the candidate cannot replace), its last component not followed
        # if the candidate swapped it for a symlink: the judge reads only what the candidate wrote.
        path = Path(allowed_folder).resolve() / Path(str(desc["path"])).name
        if Path(str(desc["path"])).resolve() != path:
            raise ValueError("output file outside the job folder")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError("output file is not a plain file")
            loaded = torch.load(f, weights_only=True, map_location="cpu")
        if not isinstance(loaded, list) or not all(isinstance(t, torch.Tensor) for t in loaded):
            raise ValueError("output file does not hold a list of tensors")
        return loaded
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
    raise ValueError(f"unknown output transfer kind {desc.get('kind')!r}")
