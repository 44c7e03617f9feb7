"""Training throughput of the Megatron and torch backends, side by side, on random Qwen3-shaped models.

    python benchmarks/train_throughput.py --quick                 # ~0.6B only, small batch (a few minutes)
    python benchmarks/train_throughput.py --out benchmarks/results/train_throughput.json
    python benchmarks/train_throughput.py --models qwen3-1.7b --samples 16 --profile \
        --variants megatron torch torch:fused_optimizer=false torch:micro_batch_tokens=16384

For each model (Qwen3-0.6B and Qwen3-1.7B shapes, random weights, bf16 compute) and each backend
in the same process on one GPU: compute_logprobs, train_sft and train_grpo, one warm-up then the
median of --steps timed calls. Reported: tokens/s (prompt + response tokens through the pass),
model TFLOP/s and MFU against the GPU's dense bf16 peak, and peak memory.

FLOPs per token (Kaplan/PaLM accounting, causal attention): forward 2*N + 2*L*d_attn*T, training
three times that (forward + backward), where N counts every matmul weight (the output projection
included, the embedding lookup not), L layers, d_attn = heads*head_dim and T the mean row length.
The torch backend keeps fp32 master weights under bf16 autocast; Megatron keeps bf16 weights with
fp32 master copies in its optimizer. Neither recomputes activations here.

--variants runs a backend with changed train knobs beside the defaults (BACKEND:key=value,...), so a
before/after is measured in one process on one GPU; --profile adds one profiled call per pass with its
GPU time by kernel category and the host gap (benchmarks/kernel_profile.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.kernel_profile import profile_call  # noqa: E402
from smart.backends import backend_class, backend_config_class  # noqa: E402
from smart.sample import Sample, SampleStatus  # noqa: E402

# Qwen3-0.6B and Qwen3-1.7B shapes (tied embeddings, vocab 151936).
SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense, SXM parts


def make_model(name: str, folder: Path, vocab: int) -> dict:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=vocab, tie_word_embeddings=True, max_position_embeddings=32768, **SHAPES[name])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    n_matmul = sum(p.numel() for n, p in model.named_parameters() if "norm" not in n)  # tied: embed = lm_head
    del model
    torch.cuda.empty_cache()
    return {"n_matmul": n_matmul, "layers": cfg.num_hidden_layers, "d_attn": cfg.num_attention_heads * cfg.head_dim}


def make_samples(n: int, seq: int, vocab: int) -> list[Sample]:
    rng = random.Random(0)
    half = seq // 2
    return [Sample(index=i, group_index=i // 4, prompt_token_ids=[rng.randrange(vocab) for _ in range(half)],
                   response_token_ids=(r := [rng.randrange(vocab) for _ in range(seq - half)]), loss_mask=[1] * len(r),
                   rollout_logprobs=[-12.0] * len(r), status=SampleStatus.COMPLETED) for i in range(n)]


def timed(fn, steps: int) -> list[float]:
    fn()  # warm-up: allocator, kernels, optimizer state
    secs = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        secs.append(time.perf_counter() - t0)
    return secs


def parse_variant(text: str) -> tuple[str, dict]:
    """'torch:fused_optimizer=false,micro_batch_tokens=16384' -> ('torch', {...}), values parsed as YAML scalars;
    a knob the backend's train config lacks is refused here, before any model is built."""
    import yaml

    kind, _, knobs = text.partition(":")
    if kind not in ("megatron", "torch"):
        raise SystemExit(f"--variants {text!r}: the backend before ':' must be megatron or torch")
    parsed = {}
    for item in filter(None, knobs.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"--variants {text!r}: write knobs as key=value, separated by commas")
        parsed[key] = yaml.safe_load(value)
    known = {f.name for f in dataclasses.fields(backend_config_class(kind))}
    if unknown := sorted(set(parsed) - known):
        raise SystemExit(f"--variants {text!r}: no train key {', '.join(unknown)} in backend {kind}; "
                         f"knobs are its train: keys, e.g. micro_batch_tokens")
    return kind, parsed


def run_backend(variant: str, folder: str, samples: list[Sample], shape: dict, args) -> list[dict]:
    kind, extra = parse_variant(variant)
    knobs = {"model_path": folder, "dtype": "bf16", "lr": 1e-6, "micro_batch_tokens": args.micro_batch_tokens, **extra}
    torch.cuda.reset_peak_memory_stats()
    backend = backend_class(kind)(backend_config_class(kind)(**knobs))
    tokens = sum(s.total_len for s in samples)
    mean_len = tokens / len(samples)
    fwd_flops_per_token = 2 * shape["n_matmul"] + 2 * shape["layers"] * shape["d_attn"] * mean_len
    adv = [1.0, -1.0] * (len(samples) // 2)
    old = [s.rollout_logprobs for s in samples]
    passes = {"compute_logprobs": (lambda: backend.compute_logprobs(samples), 1),
              "train_sft": (lambda: backend.train_sft(samples), 3),
              "train_grpo": (lambda: backend.train_grpo(samples, adv, old), 3)}
    rows = []
    for name, (fn, flop_mult) in passes.items():
        secs = timed(fn, args.steps)
        med = statistics.median(secs)
        tflops = tokens * fwd_flops_per_token * flop_mult / med / 1e12
        rows.append({"backend": variant, "pass": name, "median_s": med, "min_s": min(secs), "max_s": max(secs),
                     "tokens_per_s": tokens / med, "tflops": tflops, "mfu": tflops / args.peak_tflops,
                     "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30})
        if args.profile:
            rows[-1]["profile"] = profile_call(fn)
    del backend
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def print_profiles(results: list[dict]) -> None:
    print("\nprofiled call: GPU ms by kernel category (streams may overlap), busy = union of kernels, gap = wall - busy")
    for r in results:
        p = r["profile"]
        cats = ", ".join(f"{k} {v:.0f}" for k, v in p["ms_by_category"].items() if v >= 1)
        print(f"{r['model']} {r['backend']} {r['pass']}: wall {p['wall_ms']:.0f} busy {p['busy_ms']:.0f} "
              f"gap {p['host_gap_ms']:.0f} | {cats}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="0.6B only, 8 x 1024 tokens, 2 timed steps")
    ap.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seq", type=int, default=1024, help="tokens per sample (half prompt, half response)")
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--variants", "--backends", nargs="+", default=["megatron", "torch"],
                    help="backends to run, each optionally with changed knobs: torch:fused_optimizer=false")
    ap.add_argument("--profile", action="store_true", help="one more call per pass under torch.profiler: GPU ms by "
                    "kernel category and the host gap")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="dense bf16 peak; 0 = look up the GPU name")
    ap.add_argument("--out", default="benchmarks/results/train_throughput.json")
    args = ap.parse_args()
    for variant in args.variants:
        parse_variant(variant)  # bad knobs fail now, not after the first model is built
    if not torch.cuda.is_available():
        sys.exit("benchmarks/train_throughput.py needs a CUDA GPU (the Megatron backend's forward is CUDA-only)")
    if args.quick:
        args.models, args.samples, args.steps = ["qwen3-0.6b"], 8, 2
    device = torch.cuda.get_device_name()
    if not args.peak_tflops:
        args.peak_tflops = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device), 989.0)

    samples = make_samples(args.samples, args.seq, args.vocab)
    results = []
    for model in args.models:
        with tempfile.TemporaryDirectory() as folder:
            shape = make_model(model, Path(folder), args.vocab)
            for variant in args.variants:
                for row in run_backend(variant, folder, samples, shape, args):
                    results.append({"model": model, **row})
    print(f"\n{device}, {args.samples} samples x {args.seq} tokens per step, micro-batch budget "
          f"{args.micro_batch_tokens} tokens, median of {args.steps} (peak {args.peak_tflops:g} TFLOP/s bf16)")
    width = max(9, *(len(v) for v in args.variants))
    print(f"{'model':11s} {'backend':{width}s} {'pass':17s} {'median ms':>10s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'MFU':>6s} "
          f"{'peak GiB':>9s}")
    for r in results:
        print(f"{r['model']:11s} {r['backend']:{width}s} {r['pass']:17s} {r['median_s'] * 1e3:10.1f} {r['tokens_per_s']:10.0f} "
              f"{r['tflops']:8.1f} {r['mfu']:6.1%} {r['peak_mem_gib']:9.1f}")
    if args.profile:
        print_profiles(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device, "args": vars(args), "results": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
