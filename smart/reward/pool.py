"""The reward pool: kbencheval's EvaluatorPool with its workers as Ray actors, sized and placed by the
reward section of the config.

    pool = reward_pool(RewardConfig(num_workers=2, eval=EvalConfig(device="cpu", timeout_s=60)))
    results = pool.evaluate([(problem, llm_text), ...], backend="triton")   # EvalResults, in order

The deadline rule, the shared verdicts for repeated code and the replacement of a worker that stops
answering are the pool's (kbencheval/eval/pool/core.py); this module only says where the workers go.
"""

from __future__ import annotations

from kbencheval.eval.pool import EvaluatorPool
from kbencheval.eval.pool.workers import RayWorker
from smart.config import RewardConfig


def reward_pool(cfg: RewardConfig, slots: list | None = None, actor_cls=None) -> EvaluatorPool:
    """`slots`: placement-group slots for GPU eval workers (one per worker); None places them by Ray's
    default (CPU evaluators need no GPU). `actor_cls` replaces the Evaluators' actor (tests)."""
    options = [slot.options() for slot in slots] if slots else [{"num_gpus": 0}] * cfg.num_workers
    make_worker = None
    if actor_cls is not None:
        def make_worker(i, eval_cfg):
            return RayWorker(eval_cfg, cfg.evaluators_per_worker, options[i], actor_cls=actor_cls)
    return EvaluatorPool(cfg.eval, [cfg.eval.device] * cfg.num_workers, placement="ray",
                         evaluators_per_worker=cfg.evaluators_per_worker, ray_options=options,
                         deadline_margin_s=cfg.deadline_margin_s, worker_start_timeout_s=cfg.worker_start_timeout_s,
                         reward_section="reward.eval", keys="reward.", make_worker=make_worker)
