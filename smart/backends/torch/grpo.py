"""The GRPO training entry of the torch backend: old logprobs once, then `num_steps_per_rollout`
optimizer steps over mini-batches of the rollout, with truncated importance sampling on request.

    metrics = backend.train_grpo(samples, advantages)      # old logprobs computed inside

Old logprobs are the trainer's own, recomputed once before the first mini-batch (or the engine's with
use_rollout_logprobs=true). The first mini-batch therefore trains on-policy (ratio 1 up to bf16
noise); every later one sees a moved policy, so the ratio differs from 1 and clipping acts. With one
optimizer step a rollout there is no later mini-batch: the update's own forward gives the old logprobs
(ratio exactly 1) and the separate pass is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from smart.algo import grpo_loss
from smart.backends.torch.batching import MicroBatch
from smart.sample import Sample

# Metrics averaged over mini-batches; the rest of _step's keys are summed or taken from the last step.
_MEAN_KEYS = ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio_mean", "tis_mean", "tis_clip_frac", "grad_norm")
_SUM_KEYS = ("tokens", "trained_tokens", "micro_batches", "skipped")


def split_mini_batches(n: int, k: int) -> list[range]:
    """k contiguous, nearly equal slices of range(n) (fewer when n < k); rollout order is kept."""
    k = max(1, min(k, n))
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(k)]


def logprob_mismatch(samples: Sequence[Sample], trainer: Sequence[Sequence[float]]) -> dict[str, float]:
    """|engine logprob - trainer logprob| over loss-masked tokens: mean and max."""
    diffs = [abs(a - b) for s, lp in zip(samples, trainer) for a, b, m in zip(s.rollout_logprobs, lp, s.loss_mask) if m]
    if not diffs:
        return {}
    return {"logprob_mismatch_mean": sum(diffs) / len(diffs), "logprob_mismatch_max": max(diffs)}


def _have_rollout_logprobs(samples: Sequence[Sample]) -> bool:
    return all(len(s.rollout_logprobs) == len(s.response_token_ids) for s in samples)


def _check_rollout_logprobs(samples: Sequence[Sample], why: str) -> None:
    missing = [s.index for s in samples if len(s.rollout_logprobs) != len(s.response_token_ids)]
    if missing:
        raise ValueError(f"{why} needs each sample's rollout_logprobs; samples {missing[:5]} have none: "
                         "generate with an engine that returns logprobs or turn that option off")


def train_grpo(backend, samples: Sequence[Sample], advantages: Sequence[float],
               old_logprobs: Sequence[Sequence[float]] | None = None) -> dict[str, float]:
    g = backend.cfg.grpo
    advantages = [float(a) for a in advantages]
    if len(advantages) != len(samples) or (old_logprobs is not None and len(old_logprobs) != len(samples)):
        raise ValueError(f"train_grpo got {len(samples)} samples, {len(advantages)} advantages and "
                         f"{'no' if old_logprobs is None else len(old_logprobs)} old_logprobs lists; pass one per sample")
    keep = [i for i, s in enumerate(samples) if s.trainable]
    kept = backend._trainable(samples, "train_grpo")
    advantages = [advantages[i] for i in keep]
    if g.tis_clip > 0:
        _check_rollout_logprobs(kept, "grpo.tis_clip > 0")
    metrics: dict[str, float] = {}
    if old_logprobs is not None:
        old = [list(old_logprobs[i]) for i in keep]
    elif g.use_rollout_logprobs:
        _check_rollout_logprobs(kept, "grpo.use_rollout_logprobs=true")
        old = [list(s.rollout_logprobs) for s in kept]
    elif g.num_steps_per_rollout == 1:
        old = [None] * len(kept)  # on-policy: the loss's own forward, detached (_loss_fn)
    else:
        t0 = time.perf_counter()
        old = backend.compute_logprobs(kept, positions="loss")
        metrics["logprobs_s"] = time.perf_counter() - t0  # the old-logprob pass, apart from the update
        if _have_rollout_logprobs(kept):
            metrics |= logprob_mismatch(kept, old)
    for s, lp in zip(kept, old):
        if lp is not None and len(lp) != len(s.response_token_ids):
            raise ValueError(f"sample {s.index}: {len(lp)} old logprobs for {len(s.response_token_ids)} response "
                             "tokens; use compute_logprobs(samples) or the rollout's per-token logprobs")

    per_step: list[dict[str, float]] = []
    for part in split_mini_batches(len(kept), g.num_steps_per_rollout):
        batch = [kept[i] for i in part]
        # pre-update weights: the engine/trainer gap, measured in the update's forward where no pass before it did
        on_policy = bool(old) and old[0] is None
        measure = not per_step and (g.use_rollout_logprobs or (on_policy and _have_rollout_logprobs(batch)))
        loss_fn = _loss_fn(backend, batch, [advantages[i] for i in part], [old[i] for i in part], measure)
        per_step.append(backend._step(batch, loss_fn))
    return metrics | _combine(per_step)


def _loss_fn(backend, batch: list[Sample], advantages: list[float], old: list[list[float]], measure_mismatch: bool):
    g = backend.cfg.grpo
    denom = float(sum(sum(s.loss_mask) for s in batch)) if g.loss_agg == "token_mean" else float(len(batch))
    tis = g.tis_clip > 0 or measure_mismatch
    entropy = "loss" if g.entropy_coef > 0 else ("metric" if g.log_entropy else "none")

    def loss_fn(mb: MicroBatch, idx: list[int]):
        scores = backend._score(backend.model, mb, mb.loss_mask_BT, entropy=entropy)
        old_BT = scores.logprobs_BT.detach() if old[idx[0]] is None else mb.scatter([old[i] for i in idx])
        rollout_BT = mb.scatter([batch[i].rollout_logprobs for i in idx]) if tis else None
        ref_BT = None
        if backend.ref_model is not None:
            with torch.no_grad():
                ref_BT = backend._score(backend.ref_model, mb, mb.loss_mask_BT).logprobs_BT
        adv = torch.tensor([advantages[i] for i in idx], device=scores.logprobs_BT.device)
        loss, metrics = grpo_loss(
            scores.logprobs_BT, old_BT, adv, mb.loss_mask_BT, eps_clip=g.eps_clip, eps_clip_high=g.eps_clip_high,
            ref_logprobs_BT=ref_BT, kl_coef=g.kl_coef, kl_type=g.kl_type, entropy_BT=scores.entropy_BT,
            entropy_coef=g.entropy_coef, loss_agg=g.loss_agg, denom=denom,
            rollout_logprobs_BT=rollout_BT if g.tis_clip > 0 else None, tis_clip=g.tis_clip,
        )
        if measure_mismatch:
            on = mb.loss_mask_BT > 0
            diff = (scores.logprobs_BT.detach() - rollout_BT).abs()[on]
            metrics["logprob_mismatch_sum"] = diff.sum().item()
            metrics["logprob_mismatch_count"] = float(diff.numel())
            metrics["logprob_mismatch_max"] = diff.max().item() if diff.numel() else 0.0
        return loss, metrics

    return loss_fn


def _combine(per_step: list[dict[str, float]]) -> dict[str, float]:
    """One rollout's metrics from its optimizer steps: means, sums, and the last step's counters."""
    out = dict(per_step[-1])
    for key in _MEAN_KEYS:
        values = [m[key] for m in per_step if key in m]
        if values:
            out[key] = sum(values) / len(values)
    for key in _SUM_KEYS:
        out[key] = sum(m.get(key, 0.0) for m in per_step)
    out["tokens_per_s"] = out["tokens"] / sum(m["tokens"] / m["tokens_per_s"] for m in per_step)
    out["optimizer_steps"] = float(len(per_step))
    out["ratio_mean_last"] = per_step[-1].get("ratio_mean", 1.0)
    out["clip_frac_last"] = per_step[-1].get("clip_frac", 0.0)
    first = per_step[0]
    if "logprob_mismatch_count" in first:  # measured in the first mini-batch's forward
        out["logprob_mismatch_mean"] = first["logprob_mismatch_sum"] / max(first["logprob_mismatch_count"], 1.0)
        out["logprob_mismatch_max"] = first["logprob_mismatch_max"]
    for key in ("logprob_mismatch_sum", "logprob_mismatch_count"):
        out.pop(key, None)
    return out
