"""Placement groups for the training ranks and the rollout engines.

colocate=true : one bundle per training rank; engine i (and GPU eval actor i) share bundle i.
colocate=false: training bundles first, then one bundle per engine, then one per GPU eval actor.
With gpus_per_bundle=0 the bundles hold only a CPU share, so the same layout runs on a laptop.
"""

from __future__ import annotations

import dataclasses

import ray
from ray.util.placement_group import PlacementGroup, placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from smart.config import ClusterConfig, ConfigError


@dataclasses.dataclass
class Slot:
    """Where one actor goes: a bundle of a placement group and its share of that bundle."""

    pg: PlacementGroup
    bundle: int
    num_gpus: float
    num_cpus: float

    def options(self) -> dict:
        strategy = PlacementGroupSchedulingStrategy(placement_group=self.pg, placement_group_bundle_index=self.bundle)
        return {"scheduling_strategy": strategy, "num_gpus": self.num_gpus, "num_cpus": self.num_cpus}


@dataclasses.dataclass
class Placement:
    pg: PlacementGroup
    actor: list[Slot]
    rollout: list[Slot]
    reward: list[Slot]  # empty when evaluation runs on CPU (eval actors then need no reservation)


@dataclasses.dataclass(frozen=True)
class BundlePlan:
    """Which bundle each role's actors take, decided from the config alone (no Ray, no GPUs)."""

    bundle: dict  # the resources of every bundle
    n_bundles: int
    actor: list[int]  # bundle of training rank i
    rollout: list[int]  # bundle of engine i
    reward: list[int]  # bundle of GPU eval actor i
    share: float  # each tenant's fraction of its bundle (colocated roles split a bundle evenly)


def plan_bundles(cfg: ClusterConfig, need_actor: bool = True, need_rollout: bool = True,
                 reward_gpu_workers: int = 0) -> BundlePlan:
    gpus, cpus = cfg.gpus_per_bundle, cfg.cpus_per_bundle
    n_actor = cfg.actor_ranks if need_actor else 0
    n_rollout = cfg.rollout_num_engines if need_rollout else 0
    n_reward = reward_gpu_workers if gpus else 0
    if cfg.colocate and need_actor:
        n_bundles = n_actor
        rollout_bundles = list(range(n_rollout))
        reward_bundles = [i % n_actor for i in range(n_reward)]
        # Actors on one bundle split it evenly, so Ray packs them onto the same GPU.
        tenants = 1 + (n_rollout > 0) + -(-n_reward // n_actor)
        share = 1.0 / tenants
    else:
        n_bundles = n_actor + n_rollout + n_reward
        rollout_bundles = list(range(n_actor, n_actor + n_rollout))
        reward_bundles = list(range(n_actor + n_rollout, n_bundles))
        share = 1.0
    if n_bundles == 0:
        raise ConfigError("nothing to place: the run needs a trainer, engines or GPU eval actors")
    bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return BundlePlan(bundle, n_bundles, list(range(n_actor)), rollout_bundles, reward_bundles, share)


def make_placement(cfg: ClusterConfig, need_actor: bool = True, need_rollout: bool = True,
                   reward_gpu_workers: int = 0, timeout_s: float = 120) -> Placement:
    plan = plan_bundles(cfg, need_actor, need_rollout, reward_gpu_workers)
    pg = placement_group([dict(plan.bundle) for _ in range(plan.n_bundles)], strategy="PACK")
    ready, _ = ray.wait([pg.ready()], timeout=timeout_s)
    if not ready:
        raise ConfigError(
            f"Ray could not reserve {plan.n_bundles} bundles of {plan.bundle} within {timeout_s:g}s; lower "
            "cluster.actor_ranks / cluster.rollout_num_engines / cluster.cpus_per_bundle or add resources"
        )
    gpus, cpus, share = cfg.gpus_per_bundle, cfg.cpus_per_bundle, plan.share
    actor = [Slot(pg, b, gpus * share, cpus * share) for b in plan.actor]
    rollout = [Slot(pg, b, gpus * share, cpus * share) for b in plan.rollout]
    reward = [Slot(pg, b, gpus * share, 0.0) for b in plan.reward]
    return Placement(pg, actor, rollout, reward)
