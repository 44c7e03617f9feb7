"""TorchTrainBackend: the embedded trainer. A HF causal LM, AdamW, one optimizer step per call.

    backend = TorchTrainBackend(TrainConfig(model_path="runs/tiny-model", lr=1e-4))
    old = backend.compute_logprobs(samples)
    metrics = backend.train_grpo(samples, advantages, old)
    engine.load_weights(backend.state_dict_for_sync(), version=backend.weights_version)

Precision: master weights and Adam state are fp32; on GPU the forward runs in bf16 (autocast on one
GPU, FSDP2's MixedPrecisionPolicy on several), on CPU everything is fp32.

Data parallel: when torch.distributed is initialised with world_size > 1 the model is sharded with
FSDP2 (`fully_shard` per decoder layer, then the root). Every rank receives the *full* batch and
takes its own token-balanced shard, so the global loss denominators are known without
communication, and ranks run the same number of micro-batches (a rank that runs out repeats one
with weight 0) so FSDP's collectives line up. Tested: 2 gloo ranks on CPU and 2 NCCL ranks on
2 H200s match one process (tests/test_torch_backend_dist.py); more ranks and multi-node are untested.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from smart.algo import entropy_from_logits, grpo_loss, sft_loss, token_logprobs
from smart.backends.torch.batching import MicroBatch, build_micro_batch, pack_micro_batches
from smart.backends.torch.config import TrainConfig, missing_local_model
from smart.sample import Sample

_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class ModelPathError(ValueError):
    """model_path does not name a loadable model; the message says what to pass instead."""


def load_causal_lm(path: str, dtype: torch.dtype, attn_implementation: str = "sdpa"):
    from transformers import AutoModelForCausalLM

    if not path:
        raise ModelPathError("model_path is empty; set model_path=<local HF model folder or hub id>")
    local = Path(path).expanduser()
    if missing_local_model(path):
        raise ModelPathError(
            f"model_path {path} does not exist; point model_path at a folder with config.json "
            "(python scripts/make_tiny_model.py writes a tiny one) or at a Hugging Face hub id"
        )
    try:
        return AutoModelForCausalLM.from_pretrained(
            str(local) if local.exists() else path, dtype=dtype, attn_implementation=attn_implementation
        )
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelPathError(
            f"cannot load model_path {path} ({first}); pass a folder holding config.json and weights or a reachable hub id"
        ) from None


def _dist_info() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class TorchTrainBackend:
    def __init__(self, cfg: TrainConfig):
        cfg.validate()
        self.cfg = cfg
        self.rank, self.world_size = _dist_info()
        self.device = self._resolve_device(cfg.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # NCCL and FSDP's mesh pick up the current device
        self.compute_dtype = _DTYPES.get(cfg.dtype) or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        torch.manual_seed(cfg.seed)

        self.model = load_causal_lm(cfg.model_path, torch.float32, cfg.attn_implementation).to(self.device)
        self.model.config.use_cache = False
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
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

        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
        )
        warmup = cfg.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
        )
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
        # One FSDP unit per decoder layer (HF lists that class in _no_split_modules), then the root.
        layer_names = set(getattr(model, "_no_split_modules", None) or [])
        for module in list(model.modules()):
            if type(module).__name__ in layer_names:
                fully_shard(module, mesh=mesh, mp_policy=mp)
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

    def _logits(self, model, mb: MicroBatch) -> torch.Tensor:
        with self._autocast():
            out = model(input_ids=mb.input_ids_BT, attention_mask=mb.attention_mask_BT, use_cache=False)
        return out.logits[:, :-1]

    # ---- logprobs ------------------------------------------------------------------------------
    @torch.no_grad()
    def compute_logprobs(self, samples: Sequence[Sample], use_ref: bool = False) -> list[list[float]]:
        """Logprob of every response token (loss-masked ones included) under the current or reference model."""
        if use_ref and self.ref_model is None:
            raise ValueError("compute_logprobs(use_ref=True) needs a reference model: set use_ref_model=true")
        model = self.ref_model if use_ref else self.model
        was_training = model.training
        model.eval()
        out: dict[int, list[float]] = {}
        try:
            for idx, weight in self._plan(samples):
                mb = build_micro_batch([samples[i] for i in idx], self.device)
                lp = mb.gather(token_logprobs(self._logits(model, mb), mb.target_ids_BT))
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

        def loss_fn(mb: MicroBatch, idx: list[int], logits: torch.Tensor):
            return sft_loss(logits, mb.target_ids_BT, mb.loss_mask_BT, denom=denom), {}

        return self._step(samples, loss_fn)

    def train_grpo(
        self,
        samples: Sequence[Sample],
        advantages: Sequence[float] | torch.Tensor,
        old_logprobs: Sequence[Sequence[float]] | None = None,
    ) -> dict[str, float]:
        """One optimizer step of the GRPO loss. `advantages` has one value per sample; `old_logprobs`
        one list per sample (per response token), defaulting to the samples' rollout_logprobs.
        Untrainable samples (FAILED, ABORTED, all-zero mask) are dropped with their advantages."""
        advantages = [float(a) for a in advantages]
        if old_logprobs is None:
            old_logprobs = [s.rollout_logprobs for s in samples]
        if not (len(advantages) == len(old_logprobs) == len(samples)):
            raise ValueError(
                f"train_grpo got {len(samples)} samples, {len(advantages)} advantages and {len(old_logprobs)} "
                "old_logprobs lists; pass one advantage and one logprob list per sample"
            )
        for s, lp in zip(samples, old_logprobs):
            if len(lp) != len(s.response_token_ids):
                raise ValueError(
                    f"sample {s.index}: {len(lp)} old logprobs for {len(s.response_token_ids)} response tokens; "
                    "use compute_logprobs(samples) or the rollout's per-token logprobs"
                )
        keep = [i for i, s in enumerate(samples) if s.trainable]
        samples = self._trainable(samples, "train_grpo")
        advantages = [advantages[i] for i in keep]
        old_logprobs = [old_logprobs[i] for i in keep]
        g = self.cfg.grpo
        if g.loss_agg == "token_mean":
            denom = float(sum(sum(s.loss_mask) for s in samples))
        else:
            denom = float(len(samples))

        def loss_fn(mb: MicroBatch, idx: list[int], logits: torch.Tensor):
            logprobs = token_logprobs(logits, mb.target_ids_BT)
            old = mb.scatter([old_logprobs[i] for i in idx])
            adv = torch.tensor([advantages[i] for i in idx], device=logits.device)
            ref = None
            if self.ref_model is not None:
                with torch.no_grad():
                    ref = token_logprobs(self._logits(self.ref_model, mb), mb.target_ids_BT)
            if g.entropy_coef > 0:
                entropy = entropy_from_logits(logits)
            else:
                with torch.no_grad():
                    entropy = entropy_from_logits(logits)
            return grpo_loss(
                logprobs,
                old,
                adv,
                mb.loss_mask_BT,
                eps_clip=g.eps_clip,
                eps_clip_high=g.eps_clip_high,
                ref_logprobs_BT=ref,
                kl_coef=g.kl_coef,
                kl_type=g.kl_type,
                entropy_BT=entropy,
                entropy_coef=g.entropy_coef,
                loss_agg=g.loss_agg,
                denom=denom,
            )

        return self._step(samples, loss_fn)

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
        for k, (idx, weight) in enumerate(plan):
            if self.fsdp:
                # Reduce-scatter gradients once, after the last micro-batch.
                self.model.set_requires_gradient_sync(k == len(plan) - 1)
            mb = build_micro_batch([samples[i] for i in idx], self.device)
            logits = self._logits(self.model, mb)
            loss, metrics = loss_fn(mb, idx, logits)
            (loss * (weight * self.world_size)).backward()
            sums["loss"] += weight * loss.item()
            for key, value in metrics.items():
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
        seconds = time.perf_counter() - t0
        tokens = sum(s.total_len for s in samples)
        return {
            **sums,
            "grad_norm": grad_norm,
            "lr": lr,
            "tokens": float(tokens),
            "trained_tokens": float(sum(sum(s.loss_mask) for s in samples)),
            "tokens_per_s": tokens / seconds,
            "micro_batches": float(len(plan)),
            "skipped": float(skipped),
            "step": float(self.step),
        }

    # ---- weights out ---------------------------------------------------------------------------
    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        if not self.fsdp:
            return dict(self.model.state_dict())
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Gathers the shards; with cpu_offload only rank 0 receives the tensors.
        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def state_dict_for_sync(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """HF-named CPU copies of the weights (never views of the live parameters) for the engines.
        On several ranks every rank must call it; rank 0 gets the tensors, the others an empty dict."""
        return {
            k: v.detach().to("cpu", dtype=dtype or v.dtype, copy=True) for k, v in self._full_state_dict().items()
        }

    def export_hf(self, path: str | Path) -> Path:
        """save_pretrained the model (compute dtype) and, where model_path has one, its tokenizer."""
        path = Path(path)
        state = self.state_dict_for_sync(self.compute_dtype)
        if self.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(path, state_dict=state)
            config = json.loads((path / "config.json").read_text())
            config["dtype"] = str(self.compute_dtype).removeprefix("torch.")
            (path / "config.json").write_text(json.dumps(config, indent=2))
            tokenizer = self._tokenizer()
            if tokenizer is not None:
                tokenizer.save_pretrained(path)
        return path

    def _tokenizer(self):
        local = Path(self.cfg.model_path).expanduser()
        if local.is_dir() and not any((local / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
            return None  # weights-only folder (e.g. a test model): nothing to export
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(local) if local.exists() else self.cfg.model_path)

    # ---- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, path: str | Path) -> Path:
        """Model + optimizer (torch.distributed.checkpoint, sharded when FSDP) + step + LR schedule."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        with _single_process_dcp():
            dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(path / "state"))
        if self.rank == 0:
            torch.save({"step": self.step, "scheduler": self.scheduler.state_dict()}, path / "trainer.pt")
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        path = Path(path)
        if not (path / "trainer.pt").is_file() or not (path / "state").is_dir():
            raise ValueError(f"{path} is not a trainer checkpoint (no trainer.pt and state/); pass a folder written by save_checkpoint")
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, "optimizer": optim_sd}
        with _single_process_dcp():
            dcp.load(state, checkpoint_id=str(path / "state"))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        meta = torch.load(path / "trainer.pt", weights_only=True)
        self.step = int(meta["step"])
        self.scheduler.load_state_dict(meta["scheduler"])


@contextlib.contextmanager
def _single_process_dcp():
    # dcp warns that it "assumes a single process" when torch.distributed is off: that is our intent.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield
