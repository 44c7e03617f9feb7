"""Megatron TP=2, PP=2 and CP=2 against TP=1 on the same random Qwen3 weights: token logprobs, max and mean |delta|
in bf16 (issue 46).

    torchrun --nproc_per_node 2 benchmarks/megatron_parallel_parity.py --out OUT/megatron_parity.json

Rank 0 writes one random Qwen3 (a Hugging Face folder); every layout is built from that folder by the repo's
Megatron backend (mbridge loads the HF weights into that layout's shards), in turn, in the same two processes:
tp1 (TP=1 on each rank, data parallel 2: every sample is scored by a whole model), tp2, pp2, cp2. Each scores
the same samples; the deltas are against tp1, over every response token. A layout within bf16 noise stays
under mean 0.02 and max 0.2 (the bounds of tests/smart/test_megatron_gpu.py); the exit status is 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAYOUTS = {"tp1": {}, "tp2": {"tp": 2}, "pp2": {"pp": 2}, "cp2": {"cp": 2}}
BOUNDS = {"mean_abs": 0.02, "max_abs": 0.2}


def compare(reference: list[list[float]], other: list[list[float]]) -> dict:
    """max and mean |delta| over every token of every sample; lists must match in shape."""
    if len(reference) != len(other) or any(len(a) != len(b) for a, b in zip(reference, other)):
        raise ValueError("logprob lists differ in shape: the layouts scored different tokens")
    deltas = [abs(x - y) for a, b in zip(reference, other) for x, y in zip(a, b)]
    if not deltas:
        raise ValueError("no tokens to compare")
    return {"tokens": len(deltas), "max_abs": max(deltas), "mean_abs": sum(deltas) / len(deltas)}


def within_bounds(row: dict) -> bool:
    return all(row[k] < bound for k, bound in BOUNDS.items())


def make_samples(n: int, vocab: int, seed: int = 0):
    from smart.sample import Sample, SampleStatus

    rng = random.Random(seed)
    out = []
    for i in range(n):
        p, r = rng.randint(16, 200), rng.randint(16, 300)
        out.append(Sample(index=i, group_index=i // 2, prompt_token_ids=[rng.randrange(vocab) for _ in range(p)],
                          response_token_ids=[rng.randrange(vocab) for _ in range(r)], loss_mask=[1] * r,
                          rollout_logprobs=[-7.0] * r, status=SampleStatus.COMPLETED))
    return out


def write_model(folder: Path, vocab: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=1024, intermediate_size=3072, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False)
    Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Megatron TP/PP/CP=2 logprobs against TP=1 (torchrun, 2 ranks)")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000, help="not a multiple of 128 * tp: the padding is exercised")
    ap.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    args.vocab += 7  # padded to a multiple of 128 * tp by the backend

    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from smart.backends.megatron.backend import MegatronTrainBackend
    from smart.backends.megatron.config import MegatronTrainConfig

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    folder = [tempfile.mkdtemp(prefix="megatron-parity-") if rank == 0 else ""]
    dist.broadcast_object_list(folder)
    if rank == 0:
        write_model(Path(folder[0]), args.vocab)
    dist.barrier()
    samples = make_samples(args.samples, args.vocab)
    logprobs = {}
    for name in args.layouts:
        backend = MegatronTrainBackend(MegatronTrainConfig(model_path=folder[0], dtype="bf16", micro_batch_tokens=2048,
                                                           **LAYOUTS[name]))
        logprobs[name] = backend.compute_logprobs(samples)
        del backend
        gc.collect()
        torch.cuda.empty_cache()
        ps.destroy_model_parallel()  # the next layout initialises its own groups
        dist.barrier()
    code = 0
    if rank == 0:
        ref = args.layouts[0]
        rows = {name: {**compare(logprobs[ref], lp), "layout": LAYOUTS[name]} for name, lp in logprobs.items() if name != ref}
        for name, row in rows.items():
            row["within_bf16_noise"] = within_bounds(row)
            code |= not row["within_bf16_noise"]
            print(f"{name} vs {ref}: max |d| {row['max_abs']:.4f}, mean |d| {row['mean_abs']:.5f} over {row['tokens']} "
                  f"tokens {'ok' if row['within_bf16_noise'] else 'OUTSIDE bf16 noise'}")
        result = {"device": torch.cuda.get_device_name(), "world_size": dist.get_world_size(), "reference": ref,
                  "bounds": BOUNDS, "samples": args.samples, "vocab": args.vocab, "rows": rows}
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
