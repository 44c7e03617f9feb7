"""TorchTrainBackend: the embedded trainer. A HF causal LM, AdamW.

    backend = TorchTrainBackend(TrainConfig(model_path="runs/tiny-model", lr=1e-4))
    metrics = backend.train_step(samples, advantages)   # old logprobs once, num_steps_per_rollout updates
    engine.load_weights(backend.state_dict_for_sync(), version=backend.weights_version)

Logprobs come from `scoring.score`: only the positions that matter are projected to the vocabulary,
in chunks, at the rollout temperature (grpo.temperature); no [B, T, V] logits are ever materialised.

Precision: master weights and Adam state are fp32; on GPU the forward runs in bf16 (autocast on one
GPU, FSDP2's MixedPrecisionPolicy on several), on CPU everything is fp32.

Data parallel: when torch.distributed is initialised with world_size > 1 the model is sharded with
FSDP2 (`fully_shard` per decoder layer, then the root). Every rank receives the *full* batch and
takes its own token-balanced shard, so the global loss denominators are known without
communication, and ranks run the same number of micro-batches (a rank that runs out repeats one
with weight 0) so FSDP's collectives line up. Tested: 2 gloo ranks on CPU and 2 NCCL ranks on
two GPUs match one process (tests/smart/test_torch_backend_dist.py); more ranks and multi-node are untested.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from kbencheval.llm.base import LLMError, resolve_model_path
from smart.algo import aggregate
from smart.backends.torch import grpo
from smart.backends.torch.batching import MicroBatch, build_micro_batch, pack_micro_batches
from smart.backends.torch.config import TrainConfig
from smart.backends.torch.scoring import score
from smart.backends.torch.weights import WeightsMixin, seed_everything
from smart.sample import Sample

_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class ModelPathError(ValueError):
    """model_path does not name a loadable model; the message says what to pass instead."""


def load_causal_lm(path: str, dtype: torch.dtype, attn_implementation: str = "sdpa"):
    from transformers import AutoModelForCausalLM

    try:
        source = resolve_model_path(path, "model_path")
    except LLMError as e:
        raise ModelPathError(str(e)) from None
    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn_implementation)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelPathError(
            f"cannot load model_path {path} ({first}); pass a folder holding config.json and weights or a reachable hub id"
        ) from None


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: the modules of the classes HF lists in _no_split_modules (FSDP's units, and
    what compile_layers compiles)."""
    layer_names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in layer_names]


def _dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class TorchTrainBackend(WeightsMixin):
    def __init__(self, cfg: TrainConfig):
        cfg.validate()
        self.cfg = cfg
        self.rank, self.world_size = _dist_info()
        self.device = self._resolve_device(cfg.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # NCCL and FSDP's mesh pick up the current device
        self.compute_dtype = _DTYPES.get(cfg.dtype) or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        seed_everything(cfg.seed)

        self.model = load_causal_lm(cfg.model_path, torch.float32, cfg.attn_implementation).to(self.device)
        self.model.config.use_cache = False
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.compile_layers:
            layers = decoder_layers(self.model)
            if not layers:
                raise ValueError(f"train.compile_layers: {type(self.model).__name__} names no decoder layer class "
                                 "(_no_split_modules); set train.compile_layers=false")
            for layer in layers:
                layer.compile()
        self.ref_model = None
        if cfg.use_ref_model:
            # Inference only: keep it in the compute dtype, no fp32 master copy needed.
            self.ref_model = load_causal_lm(cfg.model_path, self.compute_dtype, cfg.attn_implementation).to(self.device)
            self.ref_model.requires_grad_(False).eval()
        self.fsdp = self.world_size > 1
        if self.fsdp:
            self._shard(self.model)
            if self.ref_model is not None:
                self._shard(self.ref_model)
        self.model.train()

        fused = cfg.fused_optimizer and self.device.type == "cuda" and not self.fsdp
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            fused=fused or None,
        )
        if cfg.optimizer_from:
            self.load_optimizer_moments(cfg.optimizer_from)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, cfg.lr_factor)
        self.step = 0

    # ---- setup -------------------------------------------------------------------------------
    def _resolve_device(self, name: str) -> torch.device:
        if name != "auto":
            return torch.device(name)
        if not torch.cuda.is_available():
            return torch.device("cpu")
        if self.world_size == 1:
            return torch.device("cuda", torch.cuda.current_device())
        local = int(os.environ.get("LOCAL_RANK", self.rank)) % torch.cuda.device_count()
        return torch.device("cuda", local)

    def _shard(self, model: torch.nn.Module) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # An explicit mesh on our device: the default mesh would pick CUDA whenever one is visible,
        # even for a gloo/CPU run.
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        mp = MixedPrecisionPolicy(param_dtype=self.compute_dtype, reduce_dtype=torch.float32)
        for layer in decoder_layers(model):  # one FSDP unit per decoder layer, then the root
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)

    @property
    def weights_version(self) -> int:
        """Bumped once per optimizer step; engines tag their weights with it."""
        return self.step

    def _autocast(self):
        if self.device.type == "cuda" and self.compute_dtype != torch.float32 and not self.fsdp:
            return torch.autocast("cuda", dtype=self.compute_dtype)
        return contextlib.nullcontext()

    # ---- batching ------------------------------------------------------------------------------
    def _plan(self, samples: Sequence[Sample]) -> list[tuple[list[int], float]]:
        """This rank's micro-batches as (sample indices, weight); the same count on every rank."""
        lengths = [s.total_len for s in samples]
        shards: list[list[int]] = [[] for _ in range(self.world_size)]
        loads = [0] * self.world_size
        for i in sorted(range(len(samples)), key=lambda i: -lengths[i]):
            r = loads.index(min(loads))  # token-balanced, deterministic: every rank computes the same split
            shards[r].append(i)
            loads[r] += lengths[i]
        per_rank = [
            [[shard[j] for j in mb] for mb in pack_micro_batches([lengths[i] for i in shard], self.cfg.micro_batch_tokens)]
            for shard in shards
        ]
        n = max(len(p) for p in per_rank)
        mine = per_rank[self.rank]
        plan = [(mb, 1.0) for mb in mine]
        # Padding steps keep FSDP's collectives in step across ranks; their loss is multiplied by 0.
        filler = mine[-1] if mine else [0]
        plan += [(filler, 0.0)] * (n - len(mine))
        return plan

    def _score(self, model, mb: MicroBatch, mask_BT: torch.Tensor, entropy: str = "none", temperature: float | None = None):
        """Logprobs at mask_BT's positions at grpo.temperature, in chunks (scoring.py): no full logits."""
        t = self.cfg.grpo.temperature if temperature is None else temperature
        return score(model, mb, mask_BT, temperature=t, chunk_tokens=self.cfg.logit_chunk_tokens,
                     entropy=entropy, autocast=self._autocast)

    # ---- logprobs ------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_logprobs(self, samples: Sequence[Sample], use_ref: bool = False,
                         positions: str = "response") -> list[list[float]]:
        """Logprob of every response token under the current or reference model, at grpo.temperature.

        positions="loss" scores only loss-masked tokens (0.0 elsewhere): what GRPO's old logprobs need.
        """
        if use_ref and self.ref_model is None:
            raise ValueError("compute_logprobs(use_ref=True) needs a reference model: set use_ref_model=true")
        model = self.ref_model if use_ref else self.model
        was_training = model.training
        model.eval()
        out: dict[int, list[float]] = {}
        try:
            for idx, weight in self._plan(samples):
                mb = build_micro_batch([samples[i] for i in idx], self.device)
                mask = mb.loss_mask_BT if positions == "loss" else mb.response_mask_BT
                lp = mb.gather(self._score(model, mb, mask).logprobs_BT)
                if weight:
                    out.update(zip(idx, lp))
        finally:
            model.train(was_training)
        if self.fsdp:
            parts: list[dict] = [None] * self.world_size  # type: ignore[list-item]
            dist.all_gather_object(parts, out)
            for p in parts:
                out.update(p)
        return [out[i] for i in range(len(samples))]

    # ---- training ------------------------------------------------------------------------------
    def train_sft(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimizer step of masked cross-entropy over the samples' loss-masked response tokens."""
        samples = self._trainable(samples, "train_sft")
        denom = float(sum(sum(s.loss_mask) for s in samples))

        def loss_fn(mb: MicroBatch, idx: list[int]):
            logprobs_BT = self._score(self.model, mb, mb.loss_mask_BT, temperature=1.0).logprobs_BT
            return aggregate(-logprobs_BT, mb.loss_mask_BT, "token_mean", denom), {}

        return self._step(samples, loss_fn)

    def train_grpo(
        self,
        samples: Sequence[Sample],
        advantages: Sequence[float] | torch.Tensor,
        old_logprobs: Sequence[Sequence[float]] | None = None,
    ) -> dict[str, float]:
        """grpo.num_steps_per_rollout optimizer steps of the GRPO loss over this rollout (grpo.py).

        `advantages`: one per sample. `old_logprobs`: one list per sample (per response token); by
        default the trainer computes them once, before the first step (the engine's with
        grpo.use_rollout_logprobs; with one step a rollout, the step's own forward). Untrainable samples (FAILED, ABORTED, all-zero mask) are dropped."""
        return grpo.train_grpo(self, samples, advantages, old_logprobs)

    def train_step(self, samples: Sequence[Sample], advantages: Sequence[float]) -> dict[str, float]:
        """One RL step on one rollout: old logprobs computed here once (or the engine's; with one update a
        rollout, the update's own forward), then grpo.num_steps_per_rollout GRPO updates. Reports logprob_mismatch_{mean,max}, the
        engine-vs-trainer gap on trained tokens, and the importance weights when grpo.tis_clip > 0."""
        return grpo.train_grpo(self, samples, advantages)

    def _trainable(self, samples: Sequence[Sample], who: str) -> list[Sample]:
        kept = [s for s in samples if s.trainable]
        if not kept:
            raise ValueError(
                f"{who}: none of the {len(samples)} samples is trainable (all FAILED/ABORTED or loss_mask all 0); "
                "skip the step when the rollout produced nothing to learn from"
            )
        return kept

    def _step(self, samples: list[Sample], loss_fn: Callable) -> dict[str, float]:
        """Accumulate gradients over this rank's micro-batches, clip, and take one optimizer step.

        Every micro-batch loss is (its share of the sum) / (global denominator), so the summed
        gradient equals the full-batch gradient however the batch was split. FSDP averages gradients
        over ranks, so each rank's loss is multiplied by world_size to keep a global sum.
        """
        t0 = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        plan = self._plan(samples)
        sums: dict[str, float] = {"loss": 0.0}
        maxima: dict[str, float] = {}
        for k, (idx, weight) in enumerate(plan):
            if self.fsdp:
                # Reduce-scatter gradients once, after the last micro-batch.
                self.model.set_requires_gradient_sync(k == len(plan) - 1)
            mb = build_micro_batch([samples[i] for i in idx], self.device)
            loss, metrics = loss_fn(mb, idx)
            (loss * (weight * self.world_size)).backward()
            sums["loss"] += weight * loss.item()
            for key, value in metrics.items():
                if key.endswith("_max"):  # maxima combine by max, everything else adds up
                    maxima[key] = max(maxima.get(key, -math.inf), value if weight else -math.inf)
                else:
                    sums[key] = sums.get(key, 0.0) + weight * value

        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm = float(grad_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        skipped = not math.isfinite(grad_norm)
        if skipped:  # a NaN/inf step would poison the weights; drop it and report
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.step += 1

        if self.fsdp:
            keys = sorted(sums)
            t = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self.device)
            dist.all_reduce(t)
            sums = dict(zip(keys, t.tolist()))
            for key in sorted(maxima):
                m = torch.tensor(maxima[key], dtype=torch.float64, device=self.device)
                dist.all_reduce(m, op=dist.ReduceOp.MAX)
                maxima[key] = m.item()
        seconds = time.perf_counter() - t0
        tokens = sum(s.total_len for s in samples)
        return {
            **sums,
            **maxima,
            "grad_norm": grad_norm,
            "lr": lr,
            "tokens": float(tokens),
            "trained_tokens": float(sum(sum(s.loss_mask) for s in samples)),
            "tokens_per_s": tokens / seconds,
            "micro_batches": float(len(plan)),
            "skipped": float(skipped),
            "step": float(self.step),
        }
