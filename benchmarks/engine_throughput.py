"""Embedded-engine decode throughput against transformers' `generate` and the previous engine loop.

    python benchmarks/engine_throughput.py --device cuda --out benchmarks/results/engine_throughput_h100.json
    python benchmarks/engine_throughput.py --quick          # CPU smoke run: tiny models, seconds

Two random Qwen3-shaped models are built locally (~20M and ~150M parameters; --quick: two tiny ones),
then for each batch size every path samples `--new-tokens` tokens after `--prompt-len` random prompt
tokens, temperature 1, top-p 1 (one warm-up call, then the median of `--reps` timed calls):
  engine         EmbeddedEngine as shipped (static KV cache, batched sampling, CUDA graphs on GPUs)
  engine_eager   the same without CUDA graphs (GPU only)
  engine_hf      EmbeddedEngine(fast=False): the model's HF forward + DynamicCache, batched sampling
  legacy         the engine loop before issue 13 (per-row torch.multinomial, growing mask, sync per step)
  hf_generate    transformers' own model.generate(do_sample=True), DynamicCache
Tokens/s counts the tokens each path actually returned. The floor is the memory-bandwidth bound of
one decode step: bytes of weights read per step over the measured device copy bandwidth (KV-cache
reads ignored, so the real bound is lower); floor tok/s = batch / floor step time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbencheval.llm import SamplingParams  # noqa: E402
from kbencheval.llm.embedded import EmbeddedEngine  # noqa: E402

# name -> (hidden, layers, heads, kv heads, intermediate, vocab)
SIZES = {"20M": (512, 8, 8, 4, 1024, 4096), "150M": (1024, 12, 16, 8, 2816, 4096)}
QUICK_SIZES = {"tiny": (64, 2, 4, 2, 128, 512), "tiny2": (128, 2, 4, 2, 256, 512)}


def build_model(folder: Path, hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int) -> str:
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from make_tiny_model import train_tokenizer

    tokenizer = train_tokenizer(vocab)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, head_dim=hidden // heads,
                         max_position_embeddings=4096, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def copy_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large device-to-device copy (read + write counted), median of 10."""
    n = (1 << 28) if device.type == "cuda" else (1 << 24)
    src, dst = torch.empty(n, dtype=torch.uint8, device=device), torch.empty(n, dtype=torch.uint8, device=device)
    times = []
    for _ in range(12):
        sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - t)
    return 2 * n / statistics.median(times[2:])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def legacy_generate(engine: EmbeddedEngine, prompts: list[list[int]], params: SamplingParams) -> list[int]:
    """The decode loop the engine shipped with before issue 13, kept here only as a baseline."""
    dev, batch = engine.device, len(prompts)
    width = max(len(p) for p in prompts)
    input_ids = torch.full((batch, width), engine.pad_id, dtype=torch.long, device=dev)
    attn = torch.zeros((batch, width), dtype=torch.long, device=dev)
    for i, ids in enumerate(prompts):
        input_ids[i, width - len(ids):] = torch.tensor(ids, device=dev)
        attn[i, width - len(ids):] = 1
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    gens = [torch.Generator(device=dev).manual_seed(params.seed + i) for i in range(batch)]
    eos = torch.tensor(sorted(engine.eos_ids), device=dev)
    done = torch.zeros(batch, dtype=torch.bool, device=dev)
    lengths = torch.zeros(batch, dtype=torch.long, device=dev)
    cur_ids, cur_pos, past = input_ids, positions, None
    for _ in range(params.max_new_tokens):
        out = engine.model(input_ids=cur_ids, attention_mask=attn, position_ids=cur_pos, past_key_values=past,
                           use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        logits = out.logits[:, -1, :].float()
        probs = torch.softmax(logits / params.temperature, dim=-1)
        next_ids = torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(gens)])
        torch.log_softmax(logits, dim=-1).gather(-1, next_ids[:, None])
        lengths += (~done).long()
        done |= torch.isin(next_ids, eos)
        if bool(done.all()):
            break
        cur_ids = torch.where(done, engine.pad_id, next_ids)[:, None]
        cur_pos = cur_pos[:, -1:] + 1
        attn = torch.cat([attn, torch.ones((batch, 1), dtype=attn.dtype, device=dev)], dim=1)
    return lengths.tolist()


@torch.no_grad()
def hf_generate(engine: EmbeddedEngine, prompts: list[list[int]], params: SamplingParams) -> list[int]:
    dev, width = engine.device, max(len(p) for p in prompts)
    ids = torch.tensor([[engine.pad_id] * (width - len(p)) + p for p in prompts], device=dev)
    attn = (torch.arange(width, device=dev)[None, :] >= torch.tensor([width - len(p) for p in prompts], device=dev)[:, None])
    out = engine.model.generate(input_ids=ids, attention_mask=attn.long(), do_sample=True, temperature=params.temperature,
                                top_p=1.0, top_k=0, max_new_tokens=params.max_new_tokens, pad_token_id=engine.pad_id)
    new = out[:, width:]
    eos = torch.tensor(sorted(engine.eos_ids), device=dev)
    hit = torch.isin(new, eos)
    first = torch.where(hit.any(1), hit.float().argmax(1) + 1, torch.full_like(hit[:, 0], new.shape[1], dtype=torch.long))
    return first.tolist()


def time_path(run, device: torch.device, reps: int) -> dict:
    run()  # warm-up: graph capture, allocator, kernels
    times, tokens = [], 0
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        lengths = run()
        sync(device)
        times.append(time.perf_counter() - t)
        tokens = sum(lengths)
    median = statistics.median(times)
    return {"seconds": round(median, 4), "spread": [round(min(times), 4), round(max(times), 4)], "tokens": tokens,
            "tok_s": round(tokens / median, 1)}


def bench_model(folder: str, size: str, device: torch.device, args, bandwidth: float) -> list[dict]:
    engines = {"engine": EmbeddedEngine(folder, device=str(device), dtype=args.dtype)}
    if device.type == "cuda":
        engines["engine_eager"] = EmbeddedEngine(folder, device=str(device), dtype=args.dtype, cuda_graphs=False)
    engines["engine_hf"] = EmbeddedEngine(folder, device=str(device), dtype=args.dtype, fast=False)
    base = engines["engine"]
    weight_bytes = sum(p.numel() * p.element_size() for p in base.model.parameters())
    n_params = sum(p.numel() for p in base.model.parameters())
    vocab = base.model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    rows = []
    for batch in args.batches:
        prompts = [torch.randint(10, vocab, (args.prompt_len,), generator=gen).tolist() for _ in range(batch)]
        params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.new_tokens, seed=0)
        paths = {name: (lambda e=e: [len(c.token_ids) for c in e.generate_ids(prompts, params)])
                 for name, e in engines.items()}
        paths["legacy"] = lambda: legacy_generate(base, prompts, params)
        paths["hf_generate"] = lambda: hf_generate(base, prompts, params)
        floor_step = weight_bytes / bandwidth
        row = {"model": size, "params_M": round(n_params / 1e6, 1), "batch": batch,
               "floor_tok_s": round(batch / floor_step, 1), "floor_step_ms": round(1e3 * floor_step, 3)}
        for name, run in paths.items():
            if args.paths and name not in args.paths:
                continue
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            result = time_path(run, device, args.reps)
            if device.type == "cuda":
                result["peak_mem_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            row[name] = result
            print(f"  {size:>5} B={batch:<3} {name:<13} {result['tok_s']:>10,.0f} tok/s  ({result['seconds']:.2f} s)",
                  flush=True)
        rows.append(row)
    return rows


def print_table(rows: list[dict], paths: list[str]) -> None:
    head = f"{'model':>6} {'batch':>5} " + " ".join(f"{p:>13}" for p in paths) + f" {'floor':>10} {'eng/legacy':>10} {'eng/hf_gen':>10}"
    print("\ntokens/s (median)\n" + head)
    for r in rows:
        cells = " ".join(f"{r[p]['tok_s']:>13,.0f}" if p in r else f"{'-':>13}" for p in paths)
        ratio = lambda other: f"{r['engine']['tok_s'] / r[other]['tok_s']:>9.1f}x" if "engine" in r and other in r else f"{'-':>10}"  # noqa: E731
        print(f"{r['model']:>6} {r['batch']:>5} {cells} {r['floor_tok_s']:>10,.0f} {ratio('legacy')} {ratio('hf_generate')}")


def write(result: dict, out: str) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="tiny models and lengths: a CPU smoke run")
    ap.add_argument("--batches", default="", help="comma list (default 1,16,64; --quick 1,4)")
    ap.add_argument("--prompt-len", type=int, default=0, help="default 400 (--quick 16)")
    ap.add_argument("--new-tokens", type=int, default=0, help="default 256 (--quick 8)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="auto", help="auto = bf16 on GPUs, fp32 on CPU")
    ap.add_argument("--sizes", default="", help="comma list of model sizes to run (default: both)")
    ap.add_argument("--paths", default="", help="comma list to run a subset (engine,engine_eager,engine_hf,legacy,hf_generate)")
    ap.add_argument("--out", default="", help="JSON file for the results")
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no GPU; pass --device cpu (and --quick)")
    args.batches = [int(b) for b in (args.batches or ("1,4" if args.quick else "1,16,64")).split(",")]
    args.prompt_len = args.prompt_len or (16 if args.quick else 400)
    args.new_tokens = args.new_tokens or (8 if args.quick else 256)
    args.paths = [p for p in args.paths.split(",") if p]
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.sizes:
        unknown = set(args.sizes.split(",")) - set(sizes)
        if unknown:
            ap.error(f"unknown --sizes {sorted(unknown)}; choose from {', '.join(sizes)}")
        sizes = {k: v for k, v in sizes.items() if k in args.sizes.split(",")}
    bandwidth = copy_bandwidth(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}; copy bandwidth {bandwidth / 1e9:.1f} GB/s; prompt {args.prompt_len}, "
          f"{args.new_tokens} new tokens, batches {args.batches}")
    rows = []
    result = {"device": name, "copy_bandwidth_gb_s": round(bandwidth / 1e9, 1), "prompt_len": args.prompt_len,
              "new_tokens": args.new_tokens, "reps": args.reps, "torch": torch.__version__, "rows": rows}
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as tmp:
        for size, shape in sizes.items():
            folder = build_model(Path(tmp) / size, *shape)
            rows += bench_model(folder, size, device, args, bandwidth)
            write(result, args.out)  # after each model: a run stopped at its time limit keeps what finished
    paths = [p for p in ("engine", "engine_eager", "engine_hf", "legacy", "hf_generate") if any(p in r for r in rows)]
    print_table(rows, paths)
    if args.out:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
