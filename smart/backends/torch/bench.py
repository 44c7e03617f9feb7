"""Training throughput of TorchTrainBackend on a randomly initialised Qwen3 of a given shape.

    python -m smart.backends.torch.bench --hidden 1024 --layers 28 --samples 16 --seq 1024

Prints tokens/s (prompt + response tokens through forward and backward) and peak GPU memory,
median of --steps timed steps after one warm-up. Random weights: the speed, not the loss, is measured.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

import torch

from smart.backends.torch import TorchTrainBackend, TrainConfig
from smart.sample import Sample, SampleStatus


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024, help="tokens per sample (half prompt, half response)")
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    args = ap.parse_args()

    from transformers import Qwen3Config, Qwen3ForCausalLM

    heads = max(args.hidden // 128, 1)
    cfg = Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=heads,
        num_key_value_heads=max(heads // 2, 1), intermediate_size=3 * args.hidden, head_dim=128,
    )
    rng = random.Random(0)
    half = args.seq // 2
    samples = [
        Sample(index=i, prompt_token_ids=[rng.randrange(args.vocab) for _ in range(half)],
               response_token_ids=(r := [rng.randrange(args.vocab) for _ in range(args.seq - half)]),
               loss_mask=[1] * len(r), rollout_logprobs=[0.0] * len(r), status=SampleStatus.COMPLETED)
        for i in range(args.samples)
    ]
    with tempfile.TemporaryDirectory() as d:
        Qwen3ForCausalLM(cfg).save_pretrained(d)
        b = TorchTrainBackend(TrainConfig(model_path=d, lr=1e-6, micro_batch_tokens=args.micro_batch_tokens,
                                          gradient_checkpointing=args.gradient_checkpointing))
    n_params = sum(p.numel() for p in b.model.parameters())
    tokens = sum(s.total_len for s in samples)
    print(f"device={torch.cuda.get_device_name() if b.device.type == 'cuda' else 'cpu'} params={n_params / 1e9:.2f}B "
          f"dtype={b.compute_dtype} samples={args.samples}x{args.seq} tokens/step={tokens}")

    def timed(name, fn):
        fn()  # warm-up
        secs = []
        for _ in range(args.steps):
            if b.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if b.device.type == "cuda":
                torch.cuda.synchronize()
            secs.append(time.perf_counter() - t0)
        med = statistics.median(secs)
        print(f"{name:18s} median {med * 1e3:8.1f} ms  (min {min(secs) * 1e3:.1f}, max {max(secs) * 1e3:.1f})  "
              f"{tokens / med:10.0f} tokens/s")

    timed("compute_logprobs", lambda: b.compute_logprobs(samples))
    timed("train_sft", lambda: b.train_sft(samples))
    old = [s.rollout_logprobs for s in samples]
    timed("train_grpo", lambda: b.train_grpo(samples, [1.0, -1.0] * (args.samples // 2), old))
    if b.device.type == "cuda":
        print(f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
