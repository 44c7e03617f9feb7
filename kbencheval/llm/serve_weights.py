"""`kbench serve`'s weight routes without disk, mirroring SGLang's request and response fields:

    POST /update_weights_from_tensor       {"serialized_named_tensors": [PAYLOAD], "load_format": null,
                                            "flush_cache": true, "weight_version": "N"}
    POST /init_weights_update_group        {"master_address", "master_port", "rank_offset", "world_size",
                                            "group_name", "backend": "gloo" | "nccl"}
    POST /update_weights_from_distributed  {"names", "dtypes", "shapes", "group_name", "flush_cache", "weight_version"}
    POST /destroy_weights_update_group     {"group_name"}
    POST /get_weights_by_name              {"name", "truncate_size": 100}  -> the tensor's first values, flattened

Each answers {"success": true, "message": ...} (HTTP 200) or {"success": false, "message": ...} (HTTP 400),
and a refused update leaves the served weights as they were (EmbeddedEngine.update_weights checks every
name and shape before it copies). `weight_version` is the client's label, accepted as SGLang accepts it;
the server's own /health weights_version counts loads, one per successful request, as the disk route does.
Thin adapters over `EmbeddedEngine.update_weights`; the transfer itself is kbencheval.llm.weight_transfer.
PAYLOAD is SGLang's (a base64 pickle: CUDA IPC handles, or tensors by value) or kbench's shm manifest;
/health lists which this server accepts (`weight_transports`) and its `host_id`. Pickles are parsed by
an allowlist unpickler (no code runs); a manifest can name only /dev/shm/kbench-weights-* files.
"""

from __future__ import annotations

import threading

GROUP_TIMEOUT_S = 600.0  # joining a group and each broadcast; the trainer's side has its own timeout


class WeightRouteError(ValueError):
    """A refused weight request; kbench serve answers it with HTTP 400 and success: false."""


def _load(server, named: list, what: str) -> dict:
    engine = server.engine
    try:
        engine.update_weights(dict(named), engine.weights_version + 1)
    except ValueError as exc:
        raise WeightRouteError(f"{exc}; the server keeps its weights (version {engine.weights_version})") from None
    return {"success": True, "message": f"loaded {len(named)} tensors {what}", "weights_version": engine.weights_version}


def update_weights_from_tensor(server, body: dict) -> dict:
    payloads = body.get("serialized_named_tensors")
    if isinstance(payloads, str):
        payloads = [payloads]
    if not (isinstance(payloads, list) and len(payloads) == 1 and isinstance(payloads[0], str)):
        raise WeightRouteError("'serialized_named_tensors' must be a list with one string (one per "
                               "tensor-parallel rank; kbench serve is one rank)")
    if body.get("load_format") not in (None, "direct"):
        raise WeightRouteError(f"load_format={body.get('load_format')!r} is not supported; send null (the default loader)")
    from kbencheval.llm.weight_transfer import deserialize_named_tensors  # torch: loaded on first use

    try:
        named = deserialize_named_tensors(payloads[0])
    except ValueError as exc:
        raise WeightRouteError(str(exc)) from None
    try:
        return _load(server, named, "from serialized tensors")
    finally:
        if any(t.is_cuda for _, t in named):  # CUDA IPC: the copies must be done before the sender frees its memory
            import torch

            torch.cuda.synchronize()
        del named


def init_weights_update_group(server, body: dict) -> dict:
    missing = [k for k in ("master_address", "master_port", "rank_offset", "world_size") if k not in body]
    if missing:
        raise WeightRouteError(f"init_weights_update_group needs {', '.join(missing)}")
    name = str(body.get("group_name") or "weight_update_group")
    with server.groups_lock:
        old = server.weight_groups.pop(name, None)
    if old is not None:  # a trainer that restarts re-forms its group under the same name
        old.close()
    from kbencheval.llm.weight_transfer import WeightGroup

    try:
        group = WeightGroup.join(str(body["master_address"]), int(body["master_port"]), int(body["rank_offset"]),
                                 int(body["world_size"]), str(body.get("backend") or "nccl"), name, GROUP_TIMEOUT_S,
                                 device=str(server.engine.device) if body.get("backend") != "gloo" else "cpu")
    except Exception as exc:  # bad fields, an unreachable master, a timeout: the client gets the reason
        raise WeightRouteError(f"could not join weight update group {name!r}: {exc.__class__.__name__}: {exc}"[:500]) from None
    with server.groups_lock:
        server.weight_groups[name] = group
    return {"success": True, "message": f"joined weight update group {name!r} as rank {group.rank} of {group.world_size}"}


def _specs(body: dict) -> list[tuple[str, str, list[int]]]:
    names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
    if not (isinstance(names, list) and isinstance(dtypes, list) and isinstance(shapes, list)
            and names and len(names) == len(dtypes) == len(shapes)):
        raise WeightRouteError("'names', 'dtypes' and 'shapes' must be non-empty lists of the same length")
    if not all(isinstance(s, list) and all(isinstance(d, int) and d >= 0 for d in s) for s in shapes):
        raise WeightRouteError("each of 'shapes' must be a list of non-negative ints")
    return [(str(n), str(d), s) for n, d, s in zip(names, dtypes, shapes)]


def update_weights_from_distributed(server, body: dict) -> dict:
    """Receive the broadcast tensors first (so the group stays in step with the sender even when the names
    are wrong), then load them all or nothing."""
    name = str(body.get("group_name") or "weight_update_group")
    specs = _specs(body)
    with server.groups_lock:
        group = server.weight_groups.get(name)
    if group is None:
        raise WeightRouteError(f"no weight update group {name!r}; POST /init_weights_update_group first")
    with group_lock(server, name):
        try:
            named = group.receive(specs)
        except ValueError as exc:  # a dtype we cannot allocate: nothing was received
            raise WeightRouteError(str(exc)) from None
        except Exception as exc:  # a timeout or a dead peer: the group is broken
            with server.groups_lock:
                server.weight_groups.pop(name, None)
            group.close()
            raise WeightRouteError(f"broadcast on group {name!r} failed ({exc.__class__.__name__}: {exc}"[:400]
                                   + "); the group is destroyed, re-initialize it") from None
    return _load(server, named, f"from group {name!r}")


def destroy_weights_update_group(server, body: dict) -> dict:
    name = str(body.get("group_name") or "weight_update_group")
    with server.groups_lock:
        group = server.weight_groups.pop(name, None)
    if group is None:
        raise WeightRouteError(f"no weight update group {name!r}")
    group.close()
    return {"success": True, "message": f"destroyed weight update group {name!r}"}


def group_lock(server, name: str):
    """One update at a time per group: broadcasts of two requests must not interleave."""
    with server.groups_lock:
        return server.group_locks.setdefault(name, threading.Lock())


def get_weights_by_name(server, body: dict) -> list:
    """SGLang's read-back route: what a sync wrote, checked against the trainer's copy."""
    name, size = str(body.get("name", "")), int(body.get("truncate_size", 100))
    # tied weights (Qwen3's lm_head and embed_tokens) are one parameter under two names: both answer
    params = dict(server.engine.model.named_parameters(remove_duplicate=False))
    if name not in params:
        raise WeightRouteError(f"no parameter {name!r}; names are the Hugging Face state-dict names")
    return params[name].detach().flatten()[:size].float().cpu().tolist()


ROUTES = {"/update_weights_from_tensor": update_weights_from_tensor,
          "/init_weights_update_group": init_weights_update_group,
          "/update_weights_from_distributed": update_weights_from_distributed,
          "/destroy_weights_update_group": destroy_weights_update_group,
          "/get_weights_by_name": get_weights_by_name}
