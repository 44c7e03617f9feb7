"""A run interrupted after step 1 and resumed draws the same prompts and tokens and computes the same
losses as a run that never stopped: real Ray, the embedded engine, the evaluator, the torch trainer.

    pytest -m slow tests/smart/test_grpo_resume.py -s        (~1-2 min on 2 CPU cores)
"""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]


def _scalars(out: Path, tag: str) -> dict[int, float]:
    from smart.tracking import read_scalars

    return read_scalars(out / "tb").get(tag, {})  # a resumed run appends a second events file


@pytest.mark.slow
def test_interrupted_and_resumed_run_equals_an_uninterrupted_one(tmp_path, local_ray, tiny_model):
    from smart.config import RLConfig, load_config
    from smart.tracking import load_rollouts
    from smart.train import train

    def run(out: Path, steps: int) -> dict:
        return train(load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", [
            f"model_path={tiny_model}", f"out_dir={out}", f"num_steps={steps}", "seed=7",
            "rollout.prompts_per_step=2",
            "rollout.n_samples_per_prompt=2", "rollout.max_new_tokens=12", "rollout.max_turns=1",
            "rollout.temperature=0.8", "rollout.filter_fn=", "reward.reward_fn=smart.reward.controls:length_reward",
            "train.lr=1e-2", "train.grpo.num_steps_per_rollout=2", "export_hf=false", "save_every=1", "keep_last_n=1"]))

    whole, parted = tmp_path / "whole", tmp_path / "parted"
    run(whole, 2)
    run(parted, 1)
    assert [p.name for p in (parted / "checkpoints").iterdir()] == ["step_000001"]
    resumed = run(parted, 2)
    assert resumed["train/step"] == 4.0  # 2 steps x 2 mini-batches: the resumed trainer continued at 2

    for step in (0, 1):
        a = load_rollouts(whole / "rollouts" / f"step_{step:05d}.jsonl")
        b = load_rollouts(parted / "rollouts" / f"step_{step:05d}.jsonl")
        assert [s.problem_key for s in a] == [s.problem_key for s in b]
        assert [s.group_index for s in a] == [s.group_index for s in b]
        assert [s.response_token_ids for s in a] == [s.response_token_ids for s in b]
        assert [s.reward for s in a] == [s.reward for s in b]
        for x, y in zip(a, b):
            assert x.rollout_logprobs == pytest.approx(y.rollout_logprobs, abs=1e-6)
    step0 = load_rollouts(whole / "rollouts" / "step_00000.jsonl")
    step1 = load_rollouts(whole / "rollouts" / "step_00001.jsonl")
    assert [s.response_token_ids for s in step0] != [s.response_token_ids for s in step1]  # new draws each step
    for tag in ("train/loss", "train/pg_loss", "train/grad_norm", "train/ratio_mean_last"):
        want, got = _scalars(whole, tag), _scalars(parted, tag)
        assert sorted(want) == sorted(got) == [0, 1], tag
        assert got == pytest.approx(want, rel=1e-5, abs=1e-7), tag
    assert _scalars(whole, "train/ratio_mean_last")[1] != pytest.approx(1.0, abs=1e-6)  # clipping had work to do
