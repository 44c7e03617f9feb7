"""One rank of the CPU equivalence test (tests/smart/test_megatron_backend_cpu.py): MegatronTrainBackend vs
TorchTrainBackend in fp32 on the same tiny Qwen3, step for step.

    python tests/smart/megatron_backend_cpu_worker.py MODEL_DIR OUT_JSON RANK WORLD PORT TP CP DISTOPT

Megatron-core's training path hard-codes CUDA in a handful of places (RoPE frequencies, the
schedule's token counter, the optimizer's scale tensor, a grad-type assert in clipping, the
optimizers' check that parameters are CUDA tensors). This process, and only it, points those at
the CPU so that the real backend code (schedule, DDP, optimizer, distributed optimizer with
DISTOPT=1, vocab-parallel losses, export, dist_checkpointing) runs over gloo.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _cuda_calls_to_cpu() -> None:
    def on_cpu(factory):
        def call(*args, device=None, **kwargs):
            kwargs.pop("pin_memory", None)
            return factory(*args, device="cpu" if device is not None and "cuda" in str(device) else device, **kwargs)
        return call

    for name in ("zeros", "tensor", "empty", "ones", "full", "arange", "zeros_like", "empty_like", "ones_like"):
        setattr(torch, name, on_cpu(getattr(torch, name)))
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    tensor_type = torch.Tensor.type

    def cuda_type_name(self, *args, **kwargs):  # the optimizers accept only torch.cuda.*Tensor parameters
        name = tensor_type(self, *args, **kwargs)
        return name.replace("torch.", "torch.cuda.", 1) if not (args or kwargs or ".cuda." in name) else name

    torch.Tensor.type = cuda_type_name

    import megatron.core.optimizer.optimizer as optimizer_module
    from megatron.core import tensor_parallel

    def clip(params, max_norm, total_norm, use_decoupled_grad=False):  # Megatron's asserts CUDA grads
        if total_norm > max_norm:
            for p in params:
                p.grad.mul_(max_norm / (total_norm + 1e-6))

    optimizer_module.clip_grad_by_total_norm_fp32 = clip
    tensor_parallel.model_parallel_cuda_manual_seed = lambda seed: None


def _samples():
    import random

    from smart.sample import Sample, SampleStatus

    rng = random.Random(0)
    out = []
    for i in range(6):
        p, r = rng.randint(2, 8), rng.randint(3, 12)
        mask = [1] * r
        if i % 2:
            mask[1:3] = [0, 0]
        out.append(Sample(index=i, group_index=i // 2, prompt_token_ids=[rng.randrange(1000) for _ in range(p)],
                          response_token_ids=[rng.randrange(1000) for _ in range(r)], loss_mask=mask,
                          rollout_logprobs=[-7.0] * r, status=SampleStatus.COMPLETED))
    return out


def _grad_mismatches(m, t) -> list[str]:
    """Megatron parameters whose gradient (sum of squares over TP shards) differs from the torch model's."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    torch_grads = {n: p.grad for n, p in t.model.named_parameters()}
    to_global = m.bridge._weight_name_mapping_mcore_local_to_global(m.model.module)
    bad = []
    for name, p in m.model.module.named_parameters():
        sq = (p.main_grad.float() ** 2).sum()
        if getattr(p, "tensor_model_parallel", False):
            dist.all_reduce(sq, group=ps.get_tensor_model_parallel_group())
        ref = sum((torch_grads[h].float() ** 2).sum() for h in m.bridge._weight_name_mapping_mcore_to_hf(to_global[name]))
        if abs(sq.item() - ref.item()) > 1e-5 * max(1.0, ref.item()):
            bad.append(f"{name}: {sq.item():.6g} vs {ref.item():.6g}")
    return bad


def main(model_dir: str, out_json: str, rank: int, world: int, port: int, tp: int, cp: int, distopt: int) -> None:
    import torch.distributed as dist

    from smart.backends.megatron.config import MegatronTrainConfig
    from smart.backends.torch import TorchTrainBackend, TrainConfig

    knobs = dict(model_path=model_dir, dtype="fp32", lr=1e-3, micro_batch_tokens=40, grad_clip=0.0)
    t = TorchTrainBackend(TrainConfig(**knobs))  # before the process group: one plain process, no FSDP
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    _cuda_calls_to_cpu()
    import smart.backends.megatron.backend as backend_module
    import smart.backends.megatron.bridge as bridge_module

    backend_module.cuda_device = lambda: torch.device("cpu")
    backend_module.make_bridge = lambda *a, **k: bridge_module.make_bridge(*a, use_cpu_initialization=True, **k)
    layout = dict(tp=tp, cp=cp, distributed_optimizer=bool(distopt))
    m = backend_module.MegatronTrainBackend(MegatronTrainConfig(**knobs, **layout))
    samples = _samples()
    found: dict = {"logprobs": [t.compute_logprobs(samples), m.compute_logprobs(samples)], "sft": []}
    for step in range(3):
        a, b = t.train_sft(samples), m.train_sft(samples)
        found["sft"].append([a["loss"], b["loss"], a["grad_norm"], b["grad_norm"]])
        if step == 0:  # a distributed optimizer's rank holds only its shard of the summed gradient
            found["grad_mismatches"] = [] if distopt else _grad_mismatches(m, t)
    adv = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0]
    a, b = t.train_step(samples, adv), m.train_step(samples, adv)
    found["grpo"] = {k: [a[k], b[k]] for k in ("loss", "pg_loss", "ratio_mean", "entropy", "grad_norm")}
    synced, reference = m.state_dict_for_sync(), t.state_dict_for_sync()
    if rank == 0:
        found["weights_max_delta"] = max((synced[k] - reference[k]).abs().max().item() for k in reference)
        found["weight_keys_equal"] = set(synced) == set(reference)
    m.save_checkpoint(Path(out_json).parent / "ckpt")
    # Two steps after the save: the second one's loss depends on the restored Adam state too.
    continued = [m.train_sft(samples)["loss"] for _ in range(2)]
    resumed = backend_module.MegatronTrainBackend(MegatronTrainConfig(**knobs, **layout))
    resumed.load_checkpoint(Path(out_json).parent / "ckpt")
    found["resume"] = [resumed.step, continued, [resumed.train_sft(samples)["loss"] for _ in range(2)]]
    if rank == 0:
        Path(out_json).write_text(json.dumps(found))
    dist.barrier()


if __name__ == "__main__":  # dist_checkpointing spawns helpers that re-import this file: keep the guard
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:9]))
