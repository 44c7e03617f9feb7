"""Weight sync time per GB, trainer -> one SGLang-style server, for rollout.sglang_weight_sync = disk, tensor
and distributed, side by side in one run on one random model.

    python benchmarks/weight_sync.py --out benchmarks/results/weight_sync_cpu.json          # CPU, ~170 MB fp32
    python benchmarks/weight_sync.py --hidden 2048 --layers 16 --repeats 5 --out benchmarks/results/weight_sync_big.json

A random Qwen3 of the given size is built (scripts/make_tiny_model.py), a `kbench serve` process serves it,
and a one-rank torch trainer (smart.ray.actor_group.TrainGroup) holds the same weights. Each repeat is one
sync exactly as smart.rollout.engines.sync_weights does it: the mode's WeightSink packs (disk: export_hf
to a folder; tensor: rank 0's state dict into the object store; distributed: rank 0 stages it), the
SGLang engine actor pushes (disk: the server loads the folder; tensor: serialized buckets over HTTP;
distributed: names over HTTP, tensors broadcast over a gloo group), then the sink releases. The first
repeat is reported apart (it forms the distributed group, and warms caches) and left out of the median. Reported per mode:
median seconds (min-max), seconds per GB and GB/s of the fp32 state dict. `kbench serve` is our
SGLang-compatible test server, not SGLang; on CPU the broadcast is gloo over loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODES = ("disk", "tensor", "distributed")


def sync_times(mode: str, cfg, trainer, url: str, model: str, repeats: int) -> list[float]:
    import ray

    from smart.rollout.engines.sglang import KIND, SGLangEngineActor, _bucket_bytes

    cfg.rollout.sglang_weight_sync = mode
    engine = SGLangEngineActor.remote(url, model, 600.0, weight_sync=mode, bucket_bytes=_bucket_bytes(cfg.rollout))
    times = []
    try:
        ray.get(engine.weights_version.remote(), timeout=120)  # the actor is up: its start is not a sync
        for version in range(1, repeats + 1):
            t0 = time.perf_counter()
            sink = KIND.weights_sink(cfg)
            packed = sink.pack(trainer, version)
            if ray.get(engine.push.remote(packed, version), timeout=900) != version:
                raise RuntimeError(f"{mode}: the engine did not report version {version}")
            sink.release(version)
            times.append(time.perf_counter() - t0)
    finally:
        ray.get(engine.close.remote(), timeout=60)
        ray.kill(engine)
    return times


def random_model(out: Path, hidden: int, layers: int) -> str:
    """scripts/make_tiny_model.py at the asked size (its tokenizer recipe, random weights)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "scripts" / "make_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.build(out, hidden=hidden, layers=layers))


def row(mode: str, times: list[float], gb: float) -> dict:
    timed = times[1:] or times
    median = statistics.median(timed)
    return {"mode": mode, "first_s": times[0], "median_s": median, "min_s": min(timed), "max_s": max(timed),
            "s_per_gb": median / gb, "gb_per_s": gb / median, "repeats_timed": len(timed)}


def run(args) -> dict:
    import ray

    from smart.config import RLConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from tests.support import kbench_server

    tmp = Path(tempfile.mkdtemp(prefix="weight-sync-bench-"))
    model = args.model or random_model(tmp / "model", args.hidden, args.layers)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}})
    cfg = RLConfig(model_path=model, out_dir=str(tmp / "run"))
    cfg.rollout.engine, cfg.rollout.weight_bucket_mb = "sglang", args.bucket_mb
    placement = make_placement(cfg.cluster)
    trainer = TrainGroup.for_run(cfg, placement.actor)
    try:
        state = ray.get(trainer.weights_ref())
        gb = sum(t.numel() * t.element_size() for t in state.values()) / 1e9
        params = sum(t.numel() for t in state.values())
        del state
        with kbench_server(model, timeout_s=600) as served:
            cfg.rollout.sglang_urls = [served.url]
            rows = [row(mode, sync_times(mode, cfg, trainer, served.url, model, args.repeats), gb) for mode in args.modes]
    finally:
        trainer.shutdown()
        ray.shutdown()
    return {"device": f"cpu ({platform.machine()})", "cpu_cores": os.cpu_count(), "params": params, "state_dict_gb": gb,
            "server": "kbench serve (SGLang-compatible test server, not SGLang)", "args": vars(args), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="weight sync time per GB: disk, tensor, distributed",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                 epilog="example: python benchmarks/weight_sync.py --out benchmarks/results/weight_sync_cpu.json")
    ap.add_argument("--model", default="", help="an HF folder to use instead of building a random one")
    ap.add_argument("--hidden", type=int, default=1024, help="random model: hidden size (a multiple of 16)")
    ap.add_argument("--layers", type=int, default=4, help="random model: decoder layers")
    ap.add_argument("--repeats", type=int, default=4, help="syncs per mode; the first is reported apart")
    ap.add_argument("--bucket-mb", type=float, default=512.0, help="rollout.weight_bucket_mb")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--out", default="", help="JSON file to write")
    args = ap.parse_args(argv)
    result = run(args)
    print(f"{result['params'] / 1e6:.1f}M params, {result['state_dict_gb']:.3f} GB state dict, {result['device']}")
    print(f"{'mode':<12} {'first s':>8} {'median s':>9} {'min-max s':>13} {'s/GB':>7} {'GB/s':>6}")
    for r in result["rows"]:
        print(f"{r['mode']:<12} {r['first_s']:8.2f} {r['median_s']:9.2f} {r['min_s']:6.2f}-{r['max_s']:<6.2f} "
              f"{r['s_per_gb']:7.2f} {r['gb_per_s']:6.2f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
