"""The reward pool: kbencheval's EvaluatorPool with its hosts as Ray actors, sized and placed by the
reward section of the config.

    pool = reward_pool(RewardConfig(eval_actors=2, eval=EvalConfig(device="cpu", timeout_s=60)))
    results = pool.evaluate([(problem, llm_text), ...], backend="triton")   # EvalResults, in order

The deadline rule, the shared verdicts for repeated code and the replacement of a host that stops
answering are the pool's (kbencheval/eval/pool/core.py); this module only says where the hosts go.
"""

from __future__ import annotations

from kbencheval.eval.pool import EvaluatorPool
from kbencheval.eval.pool.hosts import RayHost
from smart.config import RewardConfig


def reward_pool(cfg: RewardConfig, slots: list | None = None, actor_cls=None) -> EvaluatorPool:
    """`slots`: placement-group slots for GPU eval hosts (one per host); None places them by Ray's
    default (CPU evaluators need no GPU). `actor_cls` replaces the Evaluators' actor (tests)."""
    options = [slot.options() for slot in slots] if slots else [{"num_gpus": 0}] * cfg.eval_actors

    def fake_host(i, eval_cfg):
        return RayHost(eval_cfg, cfg.evaluators_per_actor, options[i], actor_cls=actor_cls)
    return EvaluatorPool(cfg.eval, [cfg.eval.device] * cfg.eval_actors, placement="ray",
                         evaluators_per_host=cfg.evaluators_per_actor, ray_options=options,
                         deadline_margin_s=cfg.deadline_margin_s, host_start_timeout_s=cfg.actor_start_timeout_s,
                         reward_section="reward.eval", make_host=fake_host if actor_cls is not None else None,
                         start_timeout_key="reward.actor_start_timeout_s",
                         deadline_key="reward.eval.timeout_s + reward.deadline_margin_s")
