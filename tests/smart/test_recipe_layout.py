"""Where every role of the 8B recipe goes on one 8-GPU node, checked on the CPU (issue 47).

    pytest -q tests/smart/test_recipe_layout.py

configs/rl_qwen3_8b_megatron.yaml as committed: the actor's 4 ranks (TP2 x CP2, data parallel 1) on 4 GPUs,
the 2 embedded engines on 2 more, the 2 GPU Evaluator workers on the last 2. The bundle plan is checked from
the config alone; then Ray (declared 8 GPUs, none present: Ray hands out GPU indices all the same) places a
probe task in every slot, and the GPU index each one is given is the one that role's actor would get.
Also the scale-downs: two GPUs (configs/rl_qwen3_8b_layout_2gpu.yaml: TP2 on both, the engine on GPU 0) and four
(configs/rl_qwen3_8b_layout_4gpu.yaml: the recipe's TP2 x CP2 actor, its two engines on the actor's first two GPUs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbencheval.config import load_config
from smart.config import RLConfig
from smart.ray.placement import plan_bundles
from smart.session import placement_request

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "configs" / "rl_qwen3_8b_megatron.yaml"
LAYOUT_2GPU = REPO / "configs" / "rl_qwen3_8b_layout_2gpu.yaml"
LAYOUT_4GPU = REPO / "configs" / "rl_qwen3_8b_layout_4gpu.yaml"


def _plan(path: Path):
    cfg = load_config(RLConfig, path, [])
    return cfg, plan_bundles(cfg.cluster, *placement_request(cfg))


def test_recipe_gives_each_role_its_own_gpus():
    cfg, plan = _plan(RECIPE)
    assert (cfg.train.tp, cfg.train.pp, cfg.train.cp) == (2, 1, 2)
    cfg.train.validate(len(plan.actor))  # 4 ranks split into tp*pp*cp = 4: data parallel 1
    assert plan.n_bundles == 8 and plan.bundle == {"CPU": cfg.cluster.cpus_per_bundle, "GPU": 1}
    assert plan.actor == [0, 1, 2, 3] and plan.rollout == [4, 5] and plan.reward == [6, 7]
    assert plan.share == 1.0  # nothing shares a GPU


def test_two_gpu_layout_colocates_the_engine_with_tp_rank_0():
    cfg, plan = _plan(LAYOUT_2GPU)
    assert (cfg.train.tp, cfg.train.pp, cfg.train.cp) == (2, 1, 1) and cfg.rollout.max_turns == 3
    cfg.train.validate(len(plan.actor))
    assert plan.n_bundles == 2 and plan.actor == [0, 1] and plan.rollout == [0] and plan.reward == [0, 1]
    assert plan.share == pytest.approx(1 / 3)  # trainer rank, engine and an Evaluator worker split a GPU


def test_four_gpu_layout_is_the_recipe_with_its_engines_on_the_actors_gpus():
    recipe, _ = _plan(RECIPE)
    cfg, plan = _plan(LAYOUT_4GPU)
    assert (cfg.train.tp, cfg.train.pp, cfg.train.cp) == (2, 1, 2)
    assert (cfg.train, cfg.reward.eval) == (recipe.train, recipe.reward.eval)  # the recipe's trainer, loss, judging
    assert (cfg.rollout.prompts_per_step, cfg.rollout.n_samples_per_prompt, cfg.rollout.max_turns) == (16, 8, 3)
    cfg.train.validate(len(plan.actor))
    assert plan.n_bundles == 4 and plan.actor == [0, 1, 2, 3] and plan.rollout == [0, 1] and plan.reward == [0, 1]


@pytest.fixture(scope="module")
def ray_with_8_gpus():
    ray = pytest.importorskip("ray")
    from smart.tracking import ray_worker_env

    # Declared resources need no devices: Ray assigns GPU indices 0-7 and sets CUDA_VISIBLE_DEVICES from them.
    ray.init(num_cpus=8, num_gpus=8, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": ray_worker_env()})
    yield ray
    ray.shutdown()


def _gpu_of_each_slot(ray, slots) -> list[int]:
    @ray.remote
    def gpu_ids():
        return [int(i) for i in ray.get_gpu_ids()]

    ids = ray.get([gpu_ids.options(**s.options()).remote() for s in slots])
    assert all(len(i) == 1 for i in ids), ids  # every tenant sits on exactly one GPU
    return [i[0] for i in ids]


@pytest.mark.slow  # a Ray start: ~10 s on 2 cores
@pytest.mark.parametrize("path, gpus", [(RECIPE, 8), (LAYOUT_2GPU, 2), (LAYOUT_4GPU, 4)],
                         ids=["recipe_8gpu", "layout_2gpu", "layout_4gpu"])
def test_ray_places_every_role_where_the_config_says(ray_with_8_gpus, path, gpus):
    from smart.ray.placement import make_placement

    ray = ray_with_8_gpus
    cfg = load_config(RLConfig, path, [])
    placement = make_placement(cfg.cluster, *placement_request(cfg), timeout_s=30)
    try:
        actor, rollout, reward = (_gpu_of_each_slot(ray, s) for s in (placement.actor, placement.rollout, placement.reward))
        by_bundle = {}  # one bundle is one GPU, whichever role asks
        for slots, got in ((placement.actor, actor), (placement.rollout, rollout), (placement.reward, reward)):
            for s, g in zip(slots, got):
                assert by_bundle.setdefault(s.bundle, g) == g, (s.bundle, by_bundle, g)
        assert len(set(actor)) == cfg.cluster.actor_ranks  # one GPU per training rank
        assert len(set(actor) | set(rollout) | set(reward)) == gpus
        if cfg.cluster.colocate:
            assert rollout == actor[:len(rollout)] and set(reward) <= set(actor)  # on the actor's first GPUs
        else:  # disjoint: the trainer, the engines and the Evaluators never share a GPU
            assert not set(actor) & set(rollout) and not (set(actor) | set(rollout)) & set(reward)
            assert len(set(rollout)) == 2 and len(set(reward)) == 2
    finally:
        ray.util.remove_placement_group(placement.pg)
