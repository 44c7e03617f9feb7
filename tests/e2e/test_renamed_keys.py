"""Keys renamed so that a word has one meaning ("worker": only a candidate's process; "backend": only the
training backend in smart) are errors that name
the new key, in a YAML config and on the command line alike; nothing is silently ignored."""

import pytest

from kbencheval.bench.evaluate import EvalRunConfig
from kbencheval.config import ConfigError, apply_overrides, from_dict
from smart.config import RLConfig, SFTConfig


@pytest.mark.parametrize("cls, old, new, value", [
    (EvalRunConfig, "cpu_workers", "cpu_evaluators", 1),
    (EvalRunConfig, "workers_per_gpu", "evaluators_per_gpu", 1),
    (RLConfig, "reward.num_workers", "reward.eval_actors", 1),
    (RLConfig, "reward.num_gpus_per_worker", "reward.gpus_per_eval_actor", 1),
    (RLConfig, "reward.evaluators_per_worker", "reward.evaluators_per_actor", 1),
    (RLConfig, "reward.worker_start_timeout_s", "reward.actor_start_timeout_s", 1),
    (RLConfig, "cluster.actor_num_workers", "cluster.actor_ranks", 1),
    (RLConfig, "cluster.num_gpus_per_worker", "cluster.gpus_per_bundle", 1),
    (RLConfig, "rollout.backend", "rollout.kernel_language", "cuda"),
    (SFTConfig, "kernel_backend", "kernel_language", "cuda"),
])
def test_a_renamed_key_is_an_error_that_names_the_new_one(cls, old, new, value):
    with pytest.raises(ConfigError, match=rf"config key '{old}' in overrides was renamed '{new}'"):
        apply_overrides(cls(), [f"{old}=1"])
    section, _, name = old.rpartition(".")
    data = {section: {name: 1}} if section else {name: 1}
    with pytest.raises(ConfigError, match=rf"'{name}' in .* was renamed '{new.rpartition('.')[2]}'"):
        from_dict(cls, data)
    cfg = apply_overrides(cls(model_path="runs/sft/hf") if cls in (RLConfig, SFTConfig) else cls(), [f"{new}={value}"])
    assert getattr(getattr(cfg, section) if section else cfg, new.rpartition(".")[2]) == value  # the new key works
