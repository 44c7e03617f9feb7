"""RA-ICL in smart rollouts: the rollout manager's prompts carry the examples retrieved for each problem."""

from __future__ import annotations

import pytest
import ray

from kbencheval.rag.index import build_index
from tests.data.test_rag import MINILM, corpus


@pytest.mark.slow
def test_rollout_prompts_use_raicl_examples(tmp_path, tiny_model, local_ray):
    from smart.config import RLConfig
    from smart.ray.placement import make_placement
    from smart.ray.rollout_manager import RolloutManager

    build_index(corpus(), tmp_path / "index", model=MINILM)
    cfg = RLConfig(model_path=tiny_model, out_dir=str(tmp_path / "run"))
    cfg.data.problems, cfg.data.heldout_fraction = ["L1_6_Softmax"], 0.0
    cfg.rollout.max_new_tokens, cfg.rollout.n_samples_per_prompt, cfg.rollout.prompts_per_step = 4, 1, 1
    cfg.rollout.prompt_style, cfg.rollout.raicl_index, cfg.rollout.raicl_k = "raicl", str(tmp_path / "index"), 1
    cfg.rollout.raicl_model = MINILM
    cfg.validate()
    placement = make_placement(cfg.cluster)
    manager = RolloutManager.remote(cfg, placement.rollout)
    try:
        samples, _ = ray.get(manager.generate.remote(0))
        user = samples[0].prompt[1]["content"]
        assert "class ModelNew(RowSoftmaxNew)" in user and user.count("Answer:") == 1
        assert "torch.softmax(x, dim=1)" in user  # the retrieved example's own program
    finally:
        ray.get(manager.shutdown.remote())
        ray.kill(manager)
        ray.util.remove_placement_group(placement.pg)
