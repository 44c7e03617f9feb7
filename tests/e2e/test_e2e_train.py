"""End to end on CPU: SFT, then GRPO single-turn and (resumed) multi-turn, with real Ray, the embedded
engine and kbencheval's evaluator under the Triton interpreter.   pytest tests/e2e/test_e2e_train.py -s

The tiny random model first memorizes one short ReLU kernel by SFT, so that sampling at temperature 1
gives a mix of correct kernels and broken ones: the rewards differ within a group and GRPO has
something to learn from.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

SHORT_RELU = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y'''


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _changed(a: dict, b: dict) -> bool:
    return any(not torch.equal(a[k].float(), b[k].float()) for k in a)


@pytest.mark.slow
def test_sft_then_rl_single_then_multi_turn(tmp_path, local_ray, tiny_model):
    from kbencheval.dataset import get_problem
    from kbencheval.prompts import build_prompt
    from smart.config import RLConfig, SFTConfig, load_config
    from kbencheval.eval import Status
    from smart.reward.presets import shaped_reward
    from smart.sft import train_sft
    from smart.tracking import load_rollouts
    from smart.train import train

    times = {}
    base = Path(tiny_model)  # read only: SFT writes its own out_dir
    problem = get_problem("bundled", 1, 1)
    messages = build_prompt(problem.source, backend="triton", style="zero_shot")
    chat = tmp_path / "relu.jsonl"
    chat.write_text(json.dumps({"messages": messages + [{"role": "assistant", "content": f"```python\n{SHORT_RELU}\n```"}]}) + "\n")

    # --- SFT: loss falls, parameters change, a HF folder comes out ---
    t0 = time.perf_counter()
    sft_cfg = load_config(SFTConfig, REPO / "configs" / "sft_tiny_cpu.yaml", [
        f"model_path={base}", f"out_dir={tmp_path / 'sft'}", "num_steps=100", "batch_size=1",
        f"data.sft_jsonl={chat}", "train.lr=5e-3", "export_hf=true"])
    sft_metrics = train_sft(sft_cfg)
    times["sft"] = time.perf_counter() - t0
    assert sft_metrics["train/loss"] < 0.2, sft_metrics
    sft_hf = tmp_path / "sft" / "hf"
    assert _changed(_weights(base), _weights(sft_hf))

    # --- RL step 1: single-turn ---
    rl_out = tmp_path / "rl"
    common = [f"model_path={sft_hf}", f"out_dir={rl_out}", "data.problems=L1_1_ReLU", "data.heldout_fraction=0",
              "rollout.prompts_per_step=2", "rollout.n_samples_per_prompt=4", "rollout.temperature=0.8",
              "rollout.max_new_tokens=260", "rollout.prompt_style=zero_shot", "reward.preset=staged",
              "train.lr=1e-3", "save_every=1"]
    t0 = time.perf_counter()
    m1 = train(load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", common + ["num_steps=1", "rollout.max_turns=1"]))
    times["rl_single_turn"] = time.perf_counter() - t0
    assert (rl_out / "checkpoints" / "step_000001" / "run_state.json").is_file()

    # --- RL step 2: multi-turn, resumed from step 1's checkpoint ---
    t0 = time.perf_counter()
    m2 = train(load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", common + ["num_steps=2", "rollout.max_turns=2"]))
    times["rl_multi_turn"] = time.perf_counter() - t0
    assert m2["time/step"] > 0 and m2["eval/shared_verdicts"] >= 0  # candidates that shared a verdict this step
    rollouts = sorted((rl_out / "rollouts").glob("step_*.jsonl"))
    assert [p.name for p in rollouts] == ["step_00000.jsonl", "step_00001.jsonl"]  # step 0 was not redone
    state = json.loads((rl_out / "checkpoints" / "step_000002" / "run_state.json").read_text())
    assert state["next_step"] == 2

    # Rewards come from real EvalResults, shaped by the staged preset; multi-turn returns are discounted.
    from smart.config import RewardConfig

    reward_cfg = RewardConfig(preset="staged")
    for path in rollouts:
        for s in load_rollouts(path):
            assert s.eval_result.device.startswith("cpu") and s.eval_result.versions, s.eval_result
            assert s.turn_reward == pytest.approx(shaped_reward(s.eval_result, reward_cfg))
    multi = load_rollouts(rollouts[1])
    turn1 = [s for s in multi if s.turn == 1]
    for s in turn1:  # a second turn exists only after an unsolved first turn; its context is masked out
        first = next(f for f in multi if f.turn == 0 and f.trajectory_id == s.trajectory_id)
        assert not first.eval_result.correct
        assert s.response_token_ids[: len(first.response_token_ids)] == first.response_token_ids
        assert sum(s.loss_mask[: len(first.response_token_ids)]) == 0
        assert first.reward == pytest.approx(first.turn_reward + 0.4 * s.turn_reward)
    assert any(s.eval_result.status == Status.CORRECT for s in load_rollouts(rollouts[0]) + multi)

    # The policy moved (at least one of the two steps kept a group with varied rewards).
    trained = [m.get("train/step") for m in (m1, m2)]
    assert any(t is not None for t in trained), (m1, m2)
    assert _changed(_weights(sft_hf), _weights(rl_out / "hf"))
    assert list((rl_out / "tb").glob("events.out.tfevents.*")) and list((tmp_path / "sft" / "tb").glob("events.*"))
    for m in (m1, m2):
        print({k: round(v, 3) for k, v in m.items() if k.startswith(("time/", "perf/", "train/tokens_per_s"))})
    print("wall seconds:", {k: round(v, 1) for k, v in times.items()})


@pytest.mark.slow
def test_engine_weights_equal_trainer_weights_after_sync(tmp_path, local_ray, tiny_model):
    from smart.config import RLConfig
    from smart.ray.actor_group import TrainGroup
    from smart.ray.placement import make_placement
    from smart.ray.rollout_manager import RolloutManager
    from smart.rollout.engines import sync_weights

    model = Path(tiny_model)
    cfg = RLConfig(model_path=str(model), out_dir=str(tmp_path / "run"))
    cfg.data.problems = ["L1_1_ReLU"]
    cfg.data.heldout_fraction = 0.0
    cfg.rollout.max_new_tokens = 8
    cfg.rollout.n_samples_per_prompt = 2
    cfg.rollout.prompts_per_step = 1
    cfg.rollout.prompt_style = "zero_shot"
    cfg.train.lr = 1e-2
    placement = make_placement(cfg.cluster)
    actor = TrainGroup.for_run(cfg, placement.actor)
    manager = RolloutManager.remote(cfg, placement.rollout)
    try:
        samples, _ = ray.get(manager.generate.remote(0))
        actor.train_grpo(samples, [1.0, -1.0], actor.compute_logprobs(samples))
        version = sync_weights(actor, manager)
        assert version == 1 and ray.get(manager.weights_versions.remote()) == [1]
        trainer_sd = ray.get(actor.weights_ref())
        engine_sd = ray.get(manager.engine_state_dict.remote())
        assert set(engine_sd) >= set(trainer_sd)
        assert all(torch.equal(engine_sd[k], trainer_sd[k]) for k in trainer_sd)
        assert _changed(_weights(model), trainer_sd)
    finally:
        ray.get(manager.shutdown.remote())
        ray.kill(manager)
        actor.shutdown()
        ray.util.remove_placement_group(placement.pg)
