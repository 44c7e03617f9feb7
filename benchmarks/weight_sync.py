"""Weight sync time per GB, trainer -> one SGLang-style server, for rollout.sglang_weight_sync = disk, tensor
and distributed, side by side in one run on one random model.

    python benchmarks/weight_sync.py --out benchmarks/results/weight_sync_cpu.json          # CPU, ~170 MB fp32
    python benchmarks/weight_sync.py --device cuda --hidden 2048 --layers 8 --repeats 3 \
        --out benchmarks/results/weight_sync_h100.json                                    # one GPU, 1.2 GB fp32

A random Qwen3 of the given size is built (scripts/make_tiny_model.py), a `kbench serve` process serves it,
and a one-rank torch trainer (smart.ray.actor_group.TrainGroup) holds the same weights. Each repeat is one
sync exactly as smart.rollout.engines.sync_weights does it: the mode's WeightSink packs (disk: export_hf
to a folder; tensor and distributed: rank 0 stages its state dict in the compute dtype), the SGLang engine
actor pushes (disk: the server loads the folder; tensor: per bucket a payload from rank 0 POSTed to
/update_weights_from_tensor; distributed: names over HTTP, tensors broadcast over a group), then the sink
releases. `tensor` picks its transport as a run does (here, server and trainer on one host: cuda_ipc
when the trainer has a GPU, else shm); `tensor-bytes` forces the by-value fallback used across hosts.
The first repeat is reported apart (it forms the distributed group, and warms caches) and left out of
the median. Reported per mode: median seconds (min-max), and seconds per GB and GB/s of what that mode
moves (its payload: the compute dtype, bf16 on a GPU, fp32 on CPU), and how tensor payloads travelled.

--device cuda puts the trainer (a Ray actor with one GPU) and the server (`kbench serve --device cuda`,
bf16, started with the trainer's CUDA_VISIBLE_DEVICES) on the same GPU, as a colocated one-GPU run has
them. There `distributed` broadcasts over gloo through host memory, not NCCL: NCCL refuses two ranks on
one GPU ("Duplicate GPU detected"), so an NCCL figure needs the server on a second GPU; the JSON says
which backend ran. --device cpu keeps both on the CPU, even on a GPU machine. The JSON is rewritten after
each mode, and a mode that fails leaves an error row (exit 1), not the others' figures lost.
`kbench serve` is our SGLang-compatible test server, not SGLang.

--server-gpu N (two GPUs, the disaggregated layout): the server runs on GPU N, apart from the trainer's, so
`distributed` broadcasts over NCCL. Before each mode the trainer's weights are nudged (random noise) and after
it the server's are read back (/get_weights_by_name, first values of a few tensors) and must equal the
trainer's bit for bit; a mismatch is that mode's error row.

    python benchmarks/weight_sync.py --device cuda --server-gpu 1 --hidden 2048 --layers 8 --repeats 3 --out W.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODES = ("disk", "tensor", "tensor-bytes", "distributed")


def sync_times(mode: str, cfg, trainer, url: str, model: str, repeats: int, group_backend: str) -> tuple[list, object, str]:
    """Seconds per sync, the last sync's packed weights (to measure the payload) and how they travelled."""
    import ray

    from smart.rollout.engines.sglang import KIND, SGLangEngineActor

    sync = cfg.rollout.sglang_weight_sync = mode.split("-")[0]
    transport = mode.split("-")[1] if "-" in mode else "auto"
    engine = SGLangEngineActor.remote(url, model, 600.0, weight_sync=sync, tensor_transport=transport)
    times, packed = [], None
    try:
        ray.get(engine.weights_version.remote(), timeout=120)  # the actor is up: its start is not a sync
        for version in range(1, repeats + 1):
            t0 = time.perf_counter()
            sink = KIND.weights_sink(cfg)
            packed = sink.pack(trainer, version)
            if sync == "distributed" and group_backend:  # the library would pick nccl for a GPU trainer
                packed = dataclasses.replace(packed, backend=group_backend)
            if ray.get(engine.push.remote(packed, version), timeout=900) != version:
                raise RuntimeError(f"{mode}: the engine did not report version {version}")
            sink.release(version)
            times.append(time.perf_counter() - t0)
        travelled = ray.get(engine.weight_transport.remote(), timeout=60)
    finally:
        ray.get(engine.close.remote(), timeout=60)
        ray.kill(engine)
    return times, packed, travelled


def payload(mode: str, packed, travelled: str) -> dict:
    """What one sync of this mode moves: GB and dtype (the engine's model casts to its own dtype on load)."""
    if mode == "disk":  # the folder of the last version stays until the next sync
        folder = Path(packed)
        gb = sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 1e9
        return {"payload_gb": gb, "payload_dtype": json.loads((folder / "config.json").read_text()).get("dtype", "?")}
    from kbencheval.llm.weight_transfer import parse_dtype

    specs = [spec for bucket in packed.buckets for spec in bucket]  # tensor and distributed: rank 0's staged plan
    gb = sum(parse_dtype(d).itemsize * math.prod(shape) for _, d, shape in specs) / 1e9
    dtypes = ",".join(sorted({d for _, d, _ in specs}))
    extra = {"group_backend": packed.backend} if mode == "distributed" else {"transport": travelled}
    return {"payload_gb": gb, "payload_dtype": dtypes, "buckets": len(packed.buckets), **extra}


def row(mode: str, times: list[float], load: dict) -> dict:
    timed = times[1:] or times
    median, gb = statistics.median(timed), load["payload_gb"]
    return {"mode": mode, "first_s": times[0], "median_s": median, "min_s": min(timed), "max_s": max(timed),
            "s_per_gb": median / gb, "gb_per_s": gb / median, "repeats_timed": len(timed), **load}


def nudge(backend, seed: int) -> None:
    """Runs in the trainer's rank: move every weight, so a sync that did nothing shows."""
    import torch

    gen = torch.Generator(device=backend.device).manual_seed(seed)
    with torch.no_grad():
        for p in backend.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen, device=p.device, dtype=p.dtype) * 1e-2)


def server_matches(url: str, state: dict, names: list[str], size: int = 64) -> list[str]:
    """Names whose first `size` values on the server differ from the trainer's, exactly, in the trainer's dtype or
    rounded to bf16 (the dtype the payload travels in on a GPU); a refused read-back counts as differing."""
    import requests
    import torch

    bad = []
    for name in names:
        got = requests.post(f"{url}/get_weights_by_name", json={"name": name, "truncate_size": size}, timeout=60).json()
        want = state[name].flatten()[:size]
        roundings = [want.float().tolist()] + ([want.to(torch.bfloat16).float().tolist()] if want.is_floating_point() else [])
        if not isinstance(got, list) or got not in roundings:
            bad.append(name)
    return bad


def trainer_device(backend) -> dict:
    """Runs in the trainer's rank (TrainRank.run): where its weights live, as its own process sees them."""
    import torch

    dev = backend.device
    return {"device": str(dev), "compute_dtype": str(backend.compute_dtype).removeprefix("torch."),
            "name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({platform.machine()})",
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def run_config(args, model: str, out_dir: str):
    """The trainer's RLConfig and the distributed group's backend ("" = the library's choice) for --device."""
    from smart.config import RLConfig

    cfg = RLConfig(model_path=model, out_dir=out_dir)
    cfg.rollout.engine, cfg.rollout.weight_bucket_mb = "sglang", args.bucket_mb
    if args.device == "cuda":
        cfg.cluster.gpus_per_bundle = 1  # Ray then sets the trainer's CUDA_VISIBLE_DEVICES to its GPU
        # the server on a GPU of its own: the library's choice (nccl); on the trainer's: gloo (see the docstring)
        return cfg, "" if args.server_gpu >= 0 else "gloo"  # the server shares that GPU and NCCL refuses two ranks on one GPU
    # Ray leaves CUDA_VISIBLE_DEVICES alone for actors without a GPU share, so on a GPU machine
    # train.device=auto would still pick the GPU: the CPU mode pins it.
    cfg.train.device = "cpu"
    return cfg, ""


def run(args) -> dict:
    import ray

    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.tracking import ray_worker_env
    from tests.support import build_tiny_model, kbench_server

    tmp = Path(tempfile.mkdtemp(prefix="weight-sync-bench-"))
    model = args.model or build_tiny_model(tmp / "model", hidden=args.hidden, layers=args.layers)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": ray_worker_env()})
    cfg, group_backend = run_config(args, model, str(tmp / "run"))
    placement = make_placement(cfg.cluster, need_rollout=False)  # SGLang engines take no slot: the GPU is the trainer's
    trainer = TrainGroup.for_run(cfg, placement.actor)
    try:
        where = trainer.run_on_ranks(trainer_device)[0]
        if not where["device"].startswith(args.device):
            raise RuntimeError(f"--device {args.device} but the trainer is on {where['device']}")
        state = ray.get(trainer.weights_ref())
        gb = sum(t.numel() * t.element_size() for t in state.values()) / 1e9
        params = sum(t.numel() for t in state.values())
        dtype = ",".join(sorted({str(t.dtype).removeprefix("torch.") for t in state.values()}))
        del state
        note = ("distributed: gloo through host memory; NCCL refuses two ranks (trainer, server) on one GPU"
                if group_backend == "gloo" else "")
        result = {"device": where["name"], "cpu_cores": os.cpu_count(), "trainer": where,
                  "server": f"kbench serve --device {args.device} (SGLang-compatible test server, not SGLang)",
                  "params": params, "state_dict_gb": gb, "state_dict_dtype": dtype, "note": note,
                  "args": vars(args), "rows": []}
        write(result, args.out)
        gpus = where["cuda_visible_devices"] if args.device == "cuda" else None  # the trainer's GPU, not "the first"
        if args.server_gpu >= 0:
            if str(args.server_gpu) == gpus:
                raise RuntimeError(f"--server-gpu {args.server_gpu} is the trainer's GPU; pick the other one")
            gpus = str(args.server_gpu)
            result["server_gpu"] = gpus
        with kbench_server(model, timeout_s=600, device=args.device, visible_gpus=gpus) as served:
            cfg.rollout.sglang_urls = [served.url]
            for i, mode in enumerate(args.modes):
                try:
                    if args.server_gpu >= 0:
                        trainer.run_on_ranks(nudge, i)
                    times, packed, travelled = sync_times(mode, cfg, trainer, served.url, model, args.repeats,
                                                          group_backend)
                    result["rows"].append(row(mode, times, payload(mode, packed, travelled)))
                    if args.server_gpu >= 0:
                        state = ray.get(trainer.weights_ref())
                        names = list(state)
                        bad = server_matches(served.url, state, [names[0], names[len(names) // 2], names[-1]])
                        del state
                        if bad:
                            raise RuntimeError(f"after {mode} the server's {bad} differ from the trainer's")
                        result["rows"][-1]["weights_equal"] = True
                except Exception as exc:  # one mode failing must not cost the others' figures (GPU time is scarce)
                    result["rows"].append({"mode": mode, "error": f"{exc.__class__.__name__}: {exc}"[-1500:]})
                write(result, args.out)  # after each mode: a step killed at its time limit keeps what finished
    finally:
        trainer.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)  # the model and the synced folders: GBs at GPU sizes
    return result


def write(result: dict, out: str) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="weight sync time per GB: disk, tensor, distributed",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                 epilog="example: python benchmarks/weight_sync.py --out benchmarks/results/weight_sync_cpu.json")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the trainer and the server run")
    ap.add_argument("--model", default="", help="an HF folder to use instead of building a random one")
    ap.add_argument("--hidden", type=int, default=1024, help="random model: hidden size (a multiple of 16)")
    ap.add_argument("--layers", type=int, default=4, help="random model: decoder layers")
    ap.add_argument("--repeats", type=int, default=4, help="syncs per mode; the first is reported apart")
    ap.add_argument("--bucket-mb", type=float, default=512.0, help="rollout.weight_bucket_mb")
    ap.add_argument("--server-gpu", type=int, default=-1,
                    help="run the server on this GPU (not the trainer's): NCCL broadcast, weights checked after each mode")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--out", default="", help="JSON file to write")
    args = ap.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            ap.error("--device cuda but torch sees no GPU; run on a GPU machine or leave --device cpu")
    result = run(args)
    print(f"{result['params'] / 1e6:.1f}M params, {result['state_dict_gb']:.3f} GB state dict "
          f"({result['state_dict_dtype']}), {result['device']}")
    print(f"{'mode':<12} {'payload':>15} {'first s':>8} {'median s':>9} {'min-max s':>13} {'s/GB':>7} {'GB/s':>6}  via")
    for r in result["rows"]:
        if "error" in r:
            print(f"{r['mode']:<12} failed: {r['error']}")
            continue
        load = f"{r['payload_gb']:.3f} GB {r['payload_dtype'].replace('bfloat', 'bf').replace('float', 'fp')}"
        via = r.get("transport") or r.get("group_backend") or "folder"
        print(f"{r['mode']:<12} {load:>15} {r['first_s']:8.2f} {r['median_s']:9.2f} {r['min_s']:6.2f}-{r['max_s']:<6.2f} "
              f"{r['s_per_gb']:7.2f} {r['gb_per_s']:6.2f}  {via}")
    if result["note"]:
        print(result["note"])
    return 1 if any("error" in r for r in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
