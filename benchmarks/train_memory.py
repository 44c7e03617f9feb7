"""Peak GPU memory of one GRPO micro-batch (forward + backward): the full-logits loss as landed before
issue #14 ("old": [B, T, V] logits, an fp32 copy, entropy over every position) against the torch
backend's chunked, response-only path ("new": smart.backends.torch.scoring).

    python benchmarks/train_memory.py                 # one GPU: Qwen3-0.6B shape, vocab 151,936, 8k/16k/32k tokens
    python benchmarks/train_memory.py --quick         # CPU smoke run: tiny shapes, checks old == new loss

Random weights (only memory and time are measured). Each micro-batch is rows x --seq tokens, half
prompt and half response, as the shipped GPU config packs them (micro_batch_tokens 32768). Both paths
run the same model, batch and loss settings; the backward pass is included, the optimizer step is not.
Prints a table and writes JSON (--out).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from smart.algo import entropy_from_logits, grpo_loss, token_logprobs
from smart.backends.torch import TorchTrainBackend, TrainConfig, build_micro_batch
from smart.backends.torch.grpo import _loss_fn
from smart.sample import Sample, SampleStatus


def old_loss(backend, mb, advantages, old_BT):
    """The GRPO micro-batch loss as the backend computed it before the chunked path (commit 7f10dbe)."""
    with backend._autocast():
        logits = backend.model(input_ids=mb.input_ids_BT, attention_mask=mb.attention_mask_BT, use_cache=False).logits[:, :-1]
    logprobs = token_logprobs(logits, mb.target_ids_BT)
    with torch.no_grad():
        entropy = entropy_from_logits(logits)
    g = backend.cfg.grpo
    adv = torch.tensor(advantages, device=logprobs.device)
    loss, _ = grpo_loss(logprobs, old_BT, adv, mb.loss_mask_BT, eps_clip=g.eps_clip, eps_clip_high=g.eps_clip_high,
                        entropy_BT=entropy, loss_agg=g.loss_agg, denom=float(mb.loss_mask_BT.sum()))
    return loss


def make_samples(n_rows: int, seq: int, vocab: int, seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    prompt, response = seq - seq // 2, seq // 2
    return [Sample(index=i, prompt_token_ids=torch.randint(vocab, (prompt,), generator=g).tolist(),
                   response_token_ids=(r := torch.randint(vocab, (response,), generator=g).tolist()),
                   loss_mask=[1] * response, rollout_logprobs=[-1.0] * response, status=SampleStatus.COMPLETED)
            for i in range(n_rows)]


def measure(backend, path: str, samples: list[Sample], repeats: int) -> dict:
    cuda = backend.device.type == "cuda"
    mb = build_micro_batch(samples, backend.device)
    idx = list(range(len(samples)))
    advantages = [1.0 if i % 2 else -1.0 for i in idx]
    old = [[-1.0] * len(s.response_token_ids) for s in samples]
    new_fn = _loss_fn(backend, samples, advantages, old, measure_mismatch=False)

    def once() -> float:
        loss = old_loss(backend, mb, advantages, mb.scatter(old)) if path == "old" else new_fn(mb, idx)[0]
        loss.backward()
        value = loss.item()
        backend.model.zero_grad(set_to_none=False)  # keep .grad allocated: both paths pay for it equally
        return value

    try:
        loss = once()  # warm-up: allocates gradients, autotunes kernels
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        secs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            once()
            if cuda:
                torch.cuda.synchronize()
            secs.append(time.perf_counter() - t0)
        peak = torch.cuda.max_memory_allocated() if cuda else None
        return {"loss": loss, "ms_median": 1e3 * statistics.median(secs), "ms_min": 1e3 * min(secs),
                "ms_max": 1e3 * max(secs), "peak_gib": peak / 2**30 if cuda else None,
                "above_weights_and_grads_gib": (peak - base) / 2**30 if cuda else None, "oom": False}
    except torch.OutOfMemoryError as e:
        return {"oom": True, "error": str(e).splitlines()[0][:200]}
    finally:
        del mb
        backend.model.zero_grad(set_to_none=False)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny CPU-sized model and batches")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=3072)
    ap.add_argument("--tokens", default="8192,16384,32768", help="micro-batch token budgets (rows x seq)")
    ap.add_argument("--seq", type=int, default=2048, help="tokens per row, half prompt and half response")
    ap.add_argument("--chunk", type=int, default=2048, help="logit_chunk_tokens of the new path")
    ap.add_argument("--no-gradient-checkpointing", action="store_true")
    ap.add_argument("--paths", default="new,old")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.quick:
        args.vocab, args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate = 1000, 64, 2, 2, 1, 128
        args.tokens, args.seq, args.chunk, args.repeats = "256,512", 64, 48, 1

    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model_cfg = Qwen3Config(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                            num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                            intermediate_size=args.intermediate, head_dim=args.hidden // args.heads,
                            tie_word_embeddings=True)
    budgets = [int(t) for t in args.tokens.split(",")]
    with tempfile.TemporaryDirectory() as d:
        Qwen3ForCausalLM(model_cfg).save_pretrained(d)
        backend = TorchTrainBackend(TrainConfig(
            model_path=d, micro_batch_tokens=max(budgets), logit_chunk_tokens=args.chunk,
            gradient_checkpointing=not args.no_gradient_checkpointing,
            device="auto" if not args.quick else "cpu"))
    device = torch.cuda.get_device_name() if backend.device.type == "cuda" else "cpu"
    n_params = sum(p.numel() for p in backend.model.parameters())
    print(f"device={device} params={n_params / 1e6:.1f}M vocab={args.vocab} dtype={backend.compute_dtype} "
          f"gradient_checkpointing={not args.no_gradient_checkpointing} chunk={args.chunk}")

    rows = []
    for path in args.paths.split(","):
        for tokens in budgets:
            samples = make_samples(max(1, tokens // args.seq), args.seq, args.vocab)
            r = measure(backend, path, samples, args.repeats)
            rows.append({"path": path, "micro_batch_tokens": tokens, "rows": len(samples),
                         "response_tokens": sum(len(s.response_token_ids) for s in samples), **r})
    print(f"{'path':5s} {'tokens':>7s} {'peak GiB':>9s} {'above w+g':>10s} {'ms (median)':>12s} {'loss':>12s}")
    for r in rows:
        if r["oom"]:
            print(f"{r['path']:5s} {r['micro_batch_tokens']:7d} {'OOM':>9s}")
            continue
        peak = "n/a" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        above = "n/a" if r["above_weights_and_grads_gib"] is None else f"{r['above_weights_and_grads_gib']:.2f}"
        print(f"{r['path']:5s} {r['micro_batch_tokens']:7d} {peak:>9s} {above:>10s} {r['ms_median']:12.1f} {r['loss']:12.6f}")
    by_key = {(r["path"], r["micro_batch_tokens"]): r for r in rows}
    for tokens in budgets:  # both paths compute the same loss (bf16 noise on a GPU)
        a, b = by_key.get(("old", tokens)), by_key.get(("new", tokens))
        if a and b and not a["oom"] and not b["oom"]:
            print(f"tokens {tokens}: |loss_old - loss_new| = {abs(a['loss'] - b['loss']):.2e}")
    out = Path(args.out or f"benchmarks/results/train_memory_{'cpu_quick' if args.quick else 'gpu'}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device, "params": n_params, "args": vars(args), "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
