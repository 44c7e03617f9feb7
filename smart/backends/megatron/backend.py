"""MegatronTrainBackend: TorchTrainBackend's surface over a Megatron-core GPTModel (TP/PP, DP, ZeRO-1).

    backend = MegatronTrainBackend(MegatronTrainConfig(model_path=DIR, tp=2))
    metrics = backend.train_step(samples, advantages)          # old logprobs inside, as the torch backend
    engine.load_weights(backend.state_dict_for_sync(), version=backend.weights_version)

Process layout: one process per GPU, torch.distributed already initialised by the caller (the Ray
TrainRank) or, for a single process, here. parallel_state splits the world into tp x pp x cp
groups with data parallel over the rest. Every rank receives the full batch; each data-parallel
rank takes its token-balanced shard as TorchTrainBackend does, so loss denominators are global.

Normalisation: each micro-batch loss is (its share of the sum) / (global denominator), exactly as in
the torch backend. `calculate_per_token_loss=True` stops Megatron from dividing by the number of
micro-batches and from averaging gradients over data-parallel ranks, and finalize_model_grads is
called without its token count, so the summed gradient is the full-batch gradient.

Precision: bf16 parameters and compute, fp32 master weights and Adam state in Megatron's
(distributed) optimizer, fp32 gradient reduction. Logprobs are fp32 from vocab-sharded logits.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist

try:
    import mbridge  # noqa: F401
    import megatron.core  # noqa: F401
except ImportError as e:
    raise ImportError(f"backend=megatron needs megatron-core and mbridge ({e}); "
                      "pip install -e '.[megatron]' or set backend=torch") from None

from smart.algo import aggregate, grpo_loss
from smart.backends import logprob_mismatch
from smart.backends.megatron.attention import cp_chunk_positions, gather_cp
from smart.backends.megatron.bridge import build_model, make_bridge
from smart.backends.megatron.checkpoint import load_optimizer_state, prepare_optimizer_for_load, sharded_state
from smart.backends.megatron.config import MegatronTrainConfig
from smart.backends.megatron.vocab_parallel import vocab_parallel_entropy, vocab_parallel_logprobs
from smart.backends.torch.batching import MicroBatch, build_micro_batch, pack_micro_batches
from smart.sample import Sample

_WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")


def init_distributed(device: torch.device) -> None:
    """A one-process group when the caller made none (tests, benchmarks, `smart sft` on one GPU)."""
    if dist.is_initialized():
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)


def init_parallel_state(tp: int, pp: int, cp: int) -> None:
    from megatron.core import parallel_state as ps

    if ps.model_parallel_is_initialized():
        have = (ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size(),
                ps.get_context_parallel_world_size())
        if have != (tp, pp, cp):
            raise ValueError(f"megatron parallel_state is already (tp, pp, cp) = {have}; one process holds one layout")
        return
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                 context_parallel_size=cp)


def shard_plan(lengths: Sequence[int], rank: int, world: int, budget: int) -> list[tuple[list[int], float]]:
    """This data-parallel rank's micro-batches as (sample indices, weight), the same count on every rank
    (TorchTrainBackend._plan's split: longest first onto the least-loaded rank; padding steps weigh 0)."""
    shards: list[list[int]] = [[] for _ in range(world)]
    loads = [0] * world
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = loads.index(min(loads))
        shards[r].append(i)
        loads[r] += lengths[i]
    per_rank = [[[shard[j] for j in mb] for mb in pack_micro_batches([lengths[i] for i in shard], budget)]
                for shard in shards]
    n = max(len(p) for p in per_rank)
    mine = per_rank[rank]
    return [(mb, 1.0) for mb in mine] + [(mine[-1] if mine else [0], 0.0)] * (n - len(mine))


class MegatronTrainBackend:
    def __init__(self, cfg: MegatronTrainConfig):
        from megatron.core import parallel_state as ps
        from megatron.core import tensor_parallel

        cfg.validate()
        self.cfg = m = cfg
        self.device = cuda_device()
        init_distributed(self.device)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        m.validate(self.world_size)
        init_parallel_state(m.tp, m.pp, m.cp)
        tensor_parallel.model_parallel_cuda_manual_seed(cfg.seed)
        self.dp_rank, self.dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
        self.last_stage = ps.is_pipeline_last_stage()
        self.compute_dtype = torch.float32 if cfg.dtype == "fp32" else torch.bfloat16
        # perform_initialization stays on although load_weights overwrites every value: Megatron marks
        # TP-sharded weights (`tensor_model_parallel`) only while initialising them, and the grad norm
        # and mbridge's TP gather on export read that mark (without it: norm of rank 0's shard only).
        self.bridge = make_bridge(
            cfg.model_path, self.compute_dtype, make_vocab_size_divisible_by=m.make_vocab_size_divisible_by * m.tp,
            calculate_per_token_loss=True,
            **(dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
               if cfg.gradient_checkpointing else {}))
        self.vocab_size = self.bridge.hf_config.vocab_size
        self.model = self._build_and_load()
        self.ref_model = self._build_and_load().requires_grad_(False).eval() if cfg.use_ref_model else None
        self._wrap_ddp_and_optimizer()
        self.step = 0

    # ---- setup -------------------------------------------------------------------------------
    def _build_and_load(self):
        from megatron.core import parallel_state as ps

        model = build_model(self.bridge, self.device, ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage())
        self.bridge.load_weights([model], self.cfg.model_path)
        return model

    def _wrap_ddp_and_optimizer(self) -> None:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        m = cfg = self.cfg
        config = self.bridge.config
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                   use_distributed_optimizer=m.distributed_optimizer)
        self.model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=self.model)
        # Our losses are already divided by the global denominator: no extra division by token count.
        config.finalize_model_grads_func = lambda chunks, num_tokens=None, **kw: finalize_model_grads(chunks, None, **kw)
        bf16 = self.compute_dtype == torch.bfloat16
        self.optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=cfg.lr, weight_decay=cfg.weight_decay, adam_beta1=cfg.adam_beta1,
            adam_beta2=cfg.adam_beta2, adam_eps=1e-8, bf16=bf16, params_dtype=self.compute_dtype,
            use_distributed_optimizer=m.distributed_optimizer,
            # grad_clip=0 means "report the norm, do not clip", as in the torch backend.
            clip_grad=cfg.grad_clip if cfg.grad_clip > 0 else 1e30,
            # A constant scale of 1 is a no-op, but it makes the optimizer check for inf/NaN and skip.
            loss_scale=1.0 if bf16 else None,
        ), [self.model])

    @property
    def weights_version(self) -> int:
        return self.step

    def _unwrapped(self):
        return self.model.module

    # ---- forward -----------------------------------------------------------------------------
    def _run(self, model, plan, samples, loss_fn: Callable | None, forward_only: bool) -> list:
        """Megatron's schedule (1F1B when pp > 1) over this rank's micro-batches; returns the last
        stage's per-micro-batch outputs of `loss_fn(mb, idx, tokens: _TokenView)` (empty elsewhere)."""
        from megatron.core import parallel_state as ps
        from megatron.core.pipeline_parallel import get_forward_backward_func

        cp, cp_rank = self.cfg.cp, ps.get_context_parallel_rank()
        items = []
        for idx, weight in plan:
            mb = build_micro_batch([samples[i] for i in idx], self.device)
            ids = mb.input_ids_BT
            if cp > 1:  # the sequence splits into 2*cp chunks; right padding is never attended to
                ids = torch.nn.functional.pad(ids, (0, -ids.shape[1] % (2 * cp)))
            targets = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
            pos = cp_chunk_positions(ids.shape[1], cp_rank, cp, self.device) if cp > 1 \
                else torch.arange(ids.shape[1], device=self.device)
            items.append((mb, idx, weight, ids[:, pos], pos, targets[:, pos]))

        def forward_step(data_iterator, chunk):
            mb, idx, weight, ids, pos, targets = next(data_iterator)
            output = chunk(ids, pos.unsqueeze(0).expand_as(ids), None)
            return output, partial(self._loss_wrapper, loss_fn, mb, idx, weight, targets)

        return get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=iter(items), model=[model],
            num_microbatches=len(items), seq_length=max(it[3].shape[1] for it in items),
            micro_batch_size=max(it[3].shape[0] for it in items), forward_only=forward_only)

    def _loss_wrapper(self, loss_fn, mb: MicroBatch, idx, weight, targets, logits_BTv):
        tokens = _TokenView(logits_BTv, targets, mb.target_ids_BT.shape[1], self.vocab_size, self.cfg.cp)
        loss, out = loss_fn(mb, idx, tokens)
        n = torch.tensor(int(mb.loss_mask_BT.sum().item()), dtype=torch.int, device=logits_BTv.device)
        # Every CP rank computes the whole micro-batch's loss from gathered logprobs, and the gather's
        # backward sums the cp copies of its gradient: 1/cp leaves exactly one.
        return loss * (weight / self.cfg.cp), n, (weight, out)

    def _broadcast_from_last_stage(self, local: dict) -> dict:
        """Merge what the last pipeline stage's first TP/CP rank of every DP replica holds, on every rank."""
        from megatron.core import parallel_state as ps

        first = ps.get_tensor_model_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
        mine = local if self.last_stage and first else {}
        parts: list = [None] * self.world_size
        dist.all_gather_object(parts, mine)
        merged: dict = {}
        for part in parts:
            for key, value in part.items():
                merged[key] = merged.get(key, 0.0) + value if isinstance(value, float) else value
        return merged

    # ---- logprobs ------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_logprobs(self, samples: Sequence[Sample], use_ref: bool = False) -> list[list[float]]:
        """Logprob of every response token (loss-masked ones included) under the current or reference model."""
        if use_ref and self.ref_model is None:
            raise ValueError("compute_logprobs(use_ref=True) needs a reference model: set use_ref_model=true")
        model = self.ref_model if use_ref else self.model
        was_training = model.training
        model.eval()
        plan = shard_plan([s.total_len for s in samples], self.dp_rank, self.dp_size, self.cfg.micro_batch_tokens)

        def loss_fn(mb, idx, tokens):
            logprobs = tokens.logprobs()
            return torch.zeros((), device=logprobs.device), dict(zip(idx, mb.gather(logprobs)))

        try:
            outputs = self._run(model, plan, samples, loss_fn, forward_only=True)
        finally:
            model.train(was_training)
        local = {i: lp for weight, out in outputs if weight for i, lp in out.items()}
        merged = self._broadcast_from_last_stage(local)
        return [merged[i] for i in range(len(samples))]

    # ---- training ------------------------------------------------------------------------------
    def train_sft(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimizer step of masked cross-entropy over the samples' loss-masked response tokens."""
        samples = _trainable(samples, "train_sft")
        denom = float(sum(sum(s.loss_mask) for s in samples))

        def loss_fn(mb, idx, tokens):
            # sft_loss's own aggregation, on logprobs from the vocab-sharded logits.
            return aggregate(-tokens.logprobs(), mb.loss_mask_BT, "token_mean", denom), {}

        return self._step(samples, loss_fn)

    def train_step(self, samples: Sequence[Sample], advantages: Sequence[float]) -> dict[str, float]:
        """One RL step: old logprobs under the current weights, then one GRPO update on them."""
        t0 = time.perf_counter()
        old_logprobs = self.compute_logprobs(samples)
        seconds = time.perf_counter() - t0  # the old-logprob pass, apart from the update
        metrics = self.train_grpo(samples, advantages, old_logprobs)
        metrics["logprobs_s"] = seconds
        metrics["rollout_logprob_abs_diff"] = logprob_mismatch(samples, old_logprobs)
        return metrics

    def train_grpo(self, samples: Sequence[Sample], advantages: Sequence[float] | torch.Tensor,
                   old_logprobs: Sequence[Sequence[float]] | None = None) -> dict[str, float]:
        """One optimizer step of smart.algo.grpo_loss; arguments as TorchTrainBackend.train_grpo."""
        advantages = [float(a) for a in advantages]
        old_logprobs = [s.rollout_logprobs for s in samples] if old_logprobs is None else old_logprobs
        if not (len(advantages) == len(old_logprobs) == len(samples)):
            raise ValueError(f"train_grpo got {len(samples)} samples, {len(advantages)} advantages and "
                             f"{len(old_logprobs)} old_logprobs lists; pass one advantage and one logprob list per sample")
        for s, lp in zip(samples, old_logprobs):
            if len(lp) != len(s.response_token_ids):
                raise ValueError(f"sample {s.index}: {len(lp)} old logprobs for {len(s.response_token_ids)} response "
                                 "tokens; use compute_logprobs(samples) or the rollout's per-token logprobs")
        keep = [i for i, s in enumerate(samples) if s.trainable]
        samples = _trainable(samples, "train_grpo")
        advantages, old_logprobs = [advantages[i] for i in keep], [old_logprobs[i] for i in keep]
        # The reference model runs its own pipeline pass up front (its stages cannot interleave with ours).
        ref_logprobs = self.compute_logprobs(samples, use_ref=True) if self.ref_model is not None else None
        g = self.cfg.grpo
        denom = float(sum(sum(s.loss_mask) for s in samples)) if g.loss_agg == "token_mean" else float(len(samples))

        def loss_fn(mb, idx, tokens):
            logprobs = tokens.logprobs()
            with torch.set_grad_enabled(g.entropy_coef > 0 and torch.is_grad_enabled()):
                entropy = tokens.entropy()
            ref = mb.scatter([ref_logprobs[i] for i in idx]) if ref_logprobs is not None else None
            return grpo_loss(
                logprobs, mb.scatter([old_logprobs[i] for i in idx]),
                torch.tensor([advantages[i] for i in idx], device=logprobs.device), mb.loss_mask_BT,
                eps_clip=g.eps_clip, eps_clip_high=g.eps_clip_high, ref_logprobs_BT=ref, kl_coef=g.kl_coef,
                kl_type=g.kl_type, entropy_BT=entropy, entropy_coef=g.entropy_coef, loss_agg=g.loss_agg, denom=denom)

        return self._step(samples, loss_fn)

    def _step(self, samples: list[Sample], loss_fn: Callable) -> dict[str, float]:
        t0 = time.perf_counter()
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        lr = self.cfg.lr * self.cfg.lr_factor(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        plan = shard_plan([s.total_len for s in samples], self.dp_rank, self.dp_size, self.cfg.micro_batch_tokens)

        def metric_loss_fn(mb, idx, tokens):
            loss, metrics = loss_fn(mb, idx, tokens)
            return loss, {"loss": loss.item(), **metrics}

        outputs = self._run(self.model, plan, samples, metric_loss_fn, forward_only=False)
        update_ok, grad_norm, _ = self.optimizer.step()
        self.step += 1
        local: dict[str, float] = {}
        for weight, metrics in outputs:
            for key, value in metrics.items():
                local[key] = local.get(key, 0.0) + weight * float(value)
        sums = self._broadcast_from_last_stage(local)
        grad_norm = float(grad_norm) if grad_norm is not None else math.nan
        tokens = sum(s.total_len for s in samples)
        return {
            "loss": 0.0, **sums, "grad_norm": grad_norm, "lr": lr, "tokens": float(tokens),
            "trained_tokens": float(sum(sum(s.loss_mask) for s in samples)),
            "tokens_per_s": tokens / (time.perf_counter() - t0), "micro_batches": float(len(plan)),
            "skipped": float(not update_ok), "step": float(self.step),
        }

    # ---- weights out ---------------------------------------------------------------------------
    def hf_weight_buckets(self, bucket_bytes: int = 512 << 20) -> Iterator[dict[str, torch.Tensor]]:
        """Full HF-named tensors (TP shards gathered, PP stages broadcast) in buckets of ~bucket_bytes,
        on every rank; every rank must iterate to the end (the gathers are collective)."""
        bucket: dict[str, torch.Tensor] = {}
        size = 0
        for name, tensor in self.bridge.export_weights([self.model]):
            bucket[name] = tensor
            size += tensor.numel() * tensor.element_size()
            if size >= bucket_bytes:
                yield bucket
                bucket, size = {}, 0
        if bucket:
            yield bucket

    def state_dict_for_sync(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """HF-named CPU copies of the weights; every rank must call it, rank 0 gets the tensors."""
        out: dict[str, torch.Tensor] = {}
        for bucket in self.hf_weight_buckets():
            if self.rank == 0:
                out.update({k: v.detach().to("cpu", dtype=dtype or v.dtype, copy=True) for k, v in bucket.items()})
        return out

    def export_hf(self, path: str | Path) -> Path:
        """A Hugging Face folder: model_path's config and tokenizer files plus the trained weights (bf16)."""
        from huggingface_hub import save_torch_state_dict

        path = Path(path)
        state = self.state_dict_for_sync(self.compute_dtype)
        if self.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            for f in Path(self.cfg.model_path).expanduser().iterdir():
                if f.is_file() and not f.name.endswith(_WEIGHT_FILES) and not f.name.endswith(".index.json"):
                    shutil.copy2(f, path / f.name)
            config = json.loads((path / "config.json").read_text())
            config["dtype"] = str(self.compute_dtype).removeprefix("torch.")
            config.pop("torch_dtype", None)
            (path / "config.json").write_text(json.dumps(config, indent=2))
            save_torch_state_dict(state, path, max_shard_size="5GB")
        dist.barrier()
        return path

    # ---- checkpoints ---------------------------------------------------------------------------
    def _sharded_state(self, loading: bool) -> dict:
        return sharded_state(self._unwrapped(), self.optimizer, loading)

    def save_checkpoint(self, path: str | Path) -> Path:
        """Model + optimizer through megatron.core.dist_checkpointing (each rank writes its shards) + step."""
        from megatron.core import dist_checkpointing

        path = Path(path)
        if self.rank == 0:
            (path / "state").mkdir(parents=True, exist_ok=True)
        dist.barrier()
        dist_checkpointing.save(self._sharded_state(loading=False), str(path / "state"))
        if self.rank == 0:
            torch.save({"step": self.step}, path / "trainer.pt")
        dist.barrier()
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        from megatron.core import dist_checkpointing

        path = Path(path)
        if not (path / "trainer.pt").is_file() or not (path / "state").is_dir():
            raise ValueError(f"{path} is not a trainer checkpoint (no trainer.pt and state/); "
                             "pass a folder written by save_checkpoint")
        prepare_optimizer_for_load(self.model, self.optimizer)
        state = dist_checkpointing.load(self._sharded_state(loading=True), str(path / "state"))
        self._unwrapped().load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        self.step = int(torch.load(path / "trainer.pt", weights_only=True)["step"])


class _TokenView:
    """One micro-batch's per-token values from this rank's vocab-sharded logits, as [B, T-1] tensors
    over the whole (shifted) sequence: CP ranks' pieces are gathered in sequence order."""

    def __init__(self, logits_BSv, targets_BS, length: int, vocab_size: int, cp: int):
        self.logits, self.targets, self.length, self.vocab_size, self.cp = logits_BSv, targets_BS, length, vocab_size, cp

    def _whole(self, x_BS: torch.Tensor) -> torch.Tensor:
        return (gather_cp(x_BS, 1) if self.cp > 1 else x_BS)[:, : self.length]

    def logprobs(self) -> torch.Tensor:
        return self._whole(vocab_parallel_logprobs(self.logits, self.targets, self.vocab_size))

    def entropy(self) -> torch.Tensor:
        return self._whole(vocab_parallel_entropy(self.logits, self.vocab_size))


# Public and looked up at call time: the CPU equivalence test (tests/smart/megatron_backend_cpu_worker.py)
# replaces it to run the backend on gloo CPU ranks.
def cuda_device() -> torch.device:
    if not torch.cuda.is_available():
        raise ValueError("backend=megatron needs a CUDA GPU (Megatron-core's forward is CUDA-only); "
                         "use backend=torch on CPU")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def _trainable(samples: Sequence[Sample], who: str) -> list[Sample]:
    kept = [s for s in samples if s.trainable]
    if not kept:
        raise ValueError(f"{who}: none of the {len(samples)} samples is trainable (all FAILED/ABORTED or loss_mask "
                         "all 0); skip the step when the rollout produced nothing to learn from")
    return kept
