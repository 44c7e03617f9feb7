"""One rank of the CPU conversion test (tests/smart/test_megatron_convert.py starts WORLD of these over gloo).

    python tests/smart/megatron_convert_worker.py MODEL_DIR OUT_JSON RANK WORLD PORT [tp|cp] [fp32|bf16]

With WORLD ranks as tensor-parallel (or context-parallel) ranks it builds this rank's GPTModel (local spec,
fp32 unless told bf16), fills every parameter with NaN, loads the HF weights through the patched mbridge
(so a parameter the name map misses stays NaN), exports back to HF names, and runs a forward on the
shard. Rank 0 writes what it found to OUT_JSON; the test compares against the HF model.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(model_dir: str, out_json: str, rank: int, world: int, port: int, layout: str = "tp",
         dtype_name: str = "fp32") -> None:
    # Megatron's RoPE moves its frequencies to torch.cuda.current_device() (and, under CP, its chunk
    # index through pinned memory and .cuda()); on a CPU-only machine those are the forward's only CUDA
    # calls, so point them at the CPU (this process only).
    torch.cuda.current_device = lambda: "cpu"
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    _tensor = torch.tensor
    torch.tensor = lambda *args, pin_memory=False, **kwargs: _tensor(*args, **kwargs)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core import parallel_state as ps
    from safetensors.torch import load_file

    from smart.backends.megatron.attention import cp_chunk_positions, gather_cp
    from smart.backends.megatron.bridge import build_model, make_bridge
    from smart.backends.megatron.vocab_parallel import vocab_parallel_entropy, vocab_parallel_logprobs

    tp, cp = (world, 1) if layout == "tp" else (1, world)
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, context_parallel_size=cp)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    bridge = make_bridge(model_dir, dtype, make_vocab_size_divisible_by=128 * tp,
                         use_cpu_initialization=True)
    model = build_model(bridge, "cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    bridge.load_weights([model], model_dir)
    unloaded = sorted(n for n, p in model.named_parameters() if torch.isnan(p).any())
    shards = {n: list(p.shape) for n, p in model.named_parameters()}

    exported = {k: v.clone() for k, v in bridge.export_weights([model])}
    # Loading casts the HF weights to the bridge's dtype: the export must give back exactly that, in that dtype.
    hf = {k: v.to(dtype) for k, v in load_file(str(Path(model_dir) / "model.safetensors")).items()}
    mismatched = sorted(k for k in hf if k not in exported or exported[k].dtype != dtype
                        or not torch.equal(hf[k], exported[k]))

    torch.manual_seed(0)
    ids = torch.randint(0, bridge.vocab_size, (2, 12))  # 12 splits into 2 * cp chunks
    targets = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
    mine = cp_chunk_positions(ids.shape[1], ps.get_context_parallel_rank(), cp)
    model.eval()
    with torch.no_grad():
        logits = model(ids[:, mine], mine.expand(ids.shape[0], -1), None)
        logprobs = vocab_parallel_logprobs(logits, targets[:, mine], bridge.vocab_size)
        entropy = vocab_parallel_entropy(logits, bridge.vocab_size)
        if cp > 1:
            logprobs, entropy = gather_cp(logprobs, 1), gather_cp(entropy, 1)
    if rank == 0:
        Path(out_json).write_text(json.dumps({
            "unloaded": unloaded, "shards": shards, "mismatched": mismatched,
            "dtypes": sorted({str(p.dtype) for p in model.parameters()}),
            "missing": sorted(set(hf) - set(exported)), "extra": sorted(set(exported) - set(hf)),
            "ids": ids.tolist(), "logprobs": logprobs[:, :-1].tolist(), "entropy": entropy.tolist(),
        }))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:])
