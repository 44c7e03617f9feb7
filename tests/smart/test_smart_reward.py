"""Reward presets and multi-turn returns, hand-computed.   pytest tests/smart/test_smart_reward.py"""

import pytest

from kbencheval.eval import EvalResult, Status
from smart.config import ConfigError, RewardConfig
from smart.ray.rollout_manager import assign_returns
from smart.reward.presets import PRESETS, preset_rewards, shaped_reward
from smart.sample import Sample


def result(status, compiled=False, correct=False, speedup=None):
    return EvalResult(status=Status(status), compiled=compiled, correct=correct, speedup=speedup)


FORMAT = result("format_error")
COMPILE_ERR = result("compile_error")
INCORRECT = result("incorrect", compiled=True)
CRASHED = result("runtime_error", compiled=True)  # built ModelNew, then forward raised
HUNG = result("timeout", compiled=True)
CORRECT_UNTIMED = result("correct", compiled=True, correct=True)
CORRECT_SLOW = result("correct", compiled=True, correct=True, speedup=0.5)
CORRECT_1_5 = result("correct", compiled=True, correct=True, speedup=1.5)
CORRECT_5 = result("correct", compiled=True, correct=True, speedup=5.0)
REJECTED = result("rejected", compiled=True, correct=True, speedup=10.0)  # a cheat that "passed"


@pytest.mark.parametrize("res, expected", [
    (FORMAT, 0.0), (COMPILE_ERR, 0.0), (CRASHED, 0.05), (HUNG, 0.05), (INCORRECT, 0.1), (CORRECT_UNTIMED, 0.3), (CORRECT_SLOW, 0.3),
    (CORRECT_1_5, 0.8), (CORRECT_5, 2.3),  # 0.3 + min(5 - 1, 2)
])
def test_tritonforge(res, expected):
    assert shaped_reward(res, RewardConfig(preset="tritonforge")) == pytest.approx(expected)


@pytest.mark.parametrize("res, expected", [
    (FORMAT, 0.0), (INCORRECT, 0.0), (CORRECT_UNTIMED, 0.3), (CORRECT_SLOW, 0.8), (CORRECT_5, 5.3),
])
def test_kevin(res, expected):
    assert shaped_reward(res, RewardConfig(preset="kevin")) == pytest.approx(expected)


@pytest.mark.parametrize("res, expected", [
    (FORMAT, 0.0), (COMPILE_ERR, 0.1), (INCORRECT, 0.1 + 0.2), (CORRECT_UNTIMED, 0.1 + 0.2 + 0.7),
    (CORRECT_1_5, 1.0 + 0.5), (CORRECT_5, 1.0 + 2.0),
])
def test_staged(res, expected):
    assert shaped_reward(res, RewardConfig(preset="staged")) == pytest.approx(expected)


@pytest.mark.parametrize("res, expected", [
    (FORMAT, 0.0), (COMPILE_ERR, 0.0), (CRASHED, 0.0), (INCORRECT, 0.0), (CORRECT_UNTIMED, 1.0), (CORRECT_SLOW, 1.0),
    (CORRECT_5, 1.0),  # speed pays nothing
])
def test_correct(res, expected):
    assert shaped_reward(res, RewardConfig(preset="correct")) == pytest.approx(expected)


@pytest.mark.parametrize("res, expected", [
    (FORMAT, 0.0), (COMPILE_ERR, 0.0), (CRASHED, 0.0), (INCORRECT, 0.0), (CORRECT_UNTIMED, 1.0),
    (CORRECT_SLOW, 0.5), (CORRECT_1_5, 1.5), (CORRECT_5, 3.0),  # 1 + min(5 - 1, 2)
])
def test_speed(res, expected):
    assert shaped_reward(res, RewardConfig(preset="speed")) == pytest.approx(expected)


def test_speed_pays_a_slow_correct_kernel_above_any_failure():
    cfg = RewardConfig(preset="speed", speedup_cap=1.0)
    crawling = result("correct", compiled=True, correct=True, speedup=0.01)
    assert shaped_reward(crawling, cfg) > max(shaped_reward(r, cfg) for r in (FORMAT, CRASHED, HUNG, INCORRECT))
    assert shaped_reward(CORRECT_5, cfg) == pytest.approx(2.0)  # capped


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_rejected_is_strictly_lowest(preset):
    cfg = RewardConfig(preset=preset)
    others = [FORMAT, COMPILE_ERR, CRASHED, HUNG, INCORRECT, CORRECT_UNTIMED, CORRECT_SLOW, CORRECT_5, None]
    assert shaped_reward(REJECTED, cfg) < min(shaped_reward(r, cfg) for r in others)


def test_rejected_reward_must_be_negative():
    with pytest.raises(ConfigError, match="rejected_reward"):
        RewardConfig(rejected_reward=0.0).validate()


def test_preset_rewards_reads_each_sample():
    samples = [Sample(index=i, eval_result=r) for i, r in enumerate([FORMAT, CORRECT_1_5, REJECTED])]
    assert preset_rewards(RewardConfig(), samples) == pytest.approx([0.0, 0.8, -1.0])


def test_assign_returns_discounts_along_each_trajectory():
    # trajectory 7: turns 0, 1, 2 (listed out of order); trajectory 9: one turn
    samples = [Sample(index=0, turn=1, trajectory_id=7), Sample(index=1, turn=0, trajectory_id=7),
               Sample(index=2, turn=0, trajectory_id=9), Sample(index=3, turn=2, trajectory_id=7)]
    assign_returns(samples, [0.1, 0.0, 0.3, 1.0], gamma=0.5)
    assert samples[3].reward == pytest.approx(1.0)
    assert samples[0].reward == pytest.approx(0.1 + 0.5 * 1.0)
    assert samples[1].reward == pytest.approx(0.0 + 0.5 * 0.6)
    assert samples[2].reward == pytest.approx(0.3)
    assert [s.turn_reward for s in samples] == [0.1, 0.0, 0.3, 1.0]


def test_single_turn_samples_keep_their_reward():
    samples = [Sample(index=i) for i in range(3)]
    assign_returns(samples, [0.2, 0.4, 0.0], gamma=0.9)
    assert [s.reward for s in samples] == pytest.approx([0.2, 0.4, 0.0])


def test_sampling_seed_depends_on_run_seed_step_and_call_only():
    from smart.ray.rollout_manager import sampling_seed

    assert sampling_seed(0, 5, 1) == sampling_seed(0, 5, 1)  # a resumed step draws what it drew before
    seeds = {sampling_seed(s, step, call) for s in (0, 1) for step in range(50) for call in range(3)}
    assert len(seeds) == 300 and max(seeds) < 2**30
