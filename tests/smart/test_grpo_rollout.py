"""Rollout-side GRPO pieces by hand: refilling filtered groups, turn-level groups, the overlong
policy, checkpoint retention and the on-policy sampling checks.   pytest tests/smart/test_grpo_rollout.py"""

import json

import pytest

from smart.algo.overlong import apply_overlong, length_penalty
from smart.config import ConfigError, RLConfig, load_config
from smart.ray.actor_group import compute_advantages
from smart.rollout.filters import groups_of, keep_varied_rewards
from smart.rollout.refill import fill_groups
from smart.sample import Sample, SampleStatus
from smart.tracking import latest_checkpoint, save_checkpoint


def _group(g, rewards, turn=0):
    return [Sample(index=i, group_index=g, turn=turn, reward=r, loss_mask=[1], response_token_ids=[1],
                   status=SampleStatus.COMPLETED) for i, r in enumerate(rewards)]


class Draws:
    """Fake rollout: prompt k's group is uniform (dropped) when k is in `uniform`."""

    def __init__(self, uniform):
        self.uniform, self.next, self.calls = set(uniform), 0, []

    def __call__(self, n):
        self.calls.append(n)
        out = []
        for k in range(self.next, self.next + n):
            out += _group(k, [1.0, 1.0] if k in self.uniform else [0.0, 1.0])
        self.next += n
        return out, {"time/generate": 1.0, "reward/mean": 0.5, "eval/shared_verdicts": float(n)}


def test_refill_counts_by_hand():
    draw = Draws(uniform={0, 2, 3, 5})
    # round 0: 0..3 -> keep 1 (3 missing); round 1: 4,5,6 -> keep 4,6 (1 missing); round 2: 7 -> keep 7
    kept, everything, m = fill_groups(draw, keep_varied_rewards, want=4, max_rounds=3)
    assert draw.calls == [4, 3, 1]
    assert sorted(groups_of(kept)) == [1, 4, 6, 7] and len(everything) == 16
    assert m["filter/refill_rounds"] == 2 and m["filter/refill_prompts"] == 4
    assert m["filter/dropped_groups"] == 4 and m["filter/kept_prompts"] == 4 and m["filter/missing_prompts"] == 0
    assert m["time/generate"] == 3.0 and m["reward/mean"] == 0.5  # times add up over rounds
    assert m["eval/shared_verdicts"] == 8.0  # so do the verdicts shared by identical code: 4 + 3 + 1


def test_refill_is_bounded_and_off_by_default():
    draw = Draws(uniform=set(range(100)))
    kept, _, m = fill_groups(draw, keep_varied_rewards, want=2, max_rounds=2)
    assert kept == [] and draw.calls == [2, 2, 2] and m["filter/missing_prompts"] == 2
    draw = Draws(uniform={0})
    kept, _, m = fill_groups(draw, keep_varied_rewards, want=2, max_rounds=0)
    assert draw.calls == [2] and sorted(groups_of(kept)) == [1] and m["filter/refill_rounds"] == 0


def test_turn_groups_by_hand():
    # one prompt, two trajectories of two turns: rewards (returns) turn 0: 1, 3; turn 1: 0, 2
    samples = _group(0, [1.0, 3.0], turn=0) + _group(0, [0.0, 2.0], turn=1)
    together = compute_advantages(samples, normalize_std=False, group_by="trajectory")
    assert together == pytest.approx([1.0 - 1.5, 3.0 - 1.5, 0.0 - 1.5, 2.0 - 1.5])
    per_turn = compute_advantages(samples, normalize_std=False, group_by="turn")
    assert per_turn == pytest.approx([-1.0, 1.0, -1.0, 1.0])
    assert set(groups_of(samples, "turn")) == {(0, 0), (0, 1)}


def test_overlong_penalty_by_hand():
    # max 100 tokens, buffer 20: free up to 80, then linear down to -penalty at 100
    assert length_penalty(80, 100, 20, 0.5) == 0.0
    assert length_penalty(90, 100, 20, 0.5) == pytest.approx(-0.25)
    assert length_penalty(100, 100, 20, 0.5) == pytest.approx(-0.5)
    # a multi-turn sample: context tokens (mask 0) do not count towards this turn's length
    s = Sample(response_token_ids=[1] * 150, loss_mask=[0] * 55 + [1] * 95, status=SampleStatus.TRUNCATED)
    assert apply_overlong([s], [1.0], "penalty", 100, 20, 1.0) == pytest.approx([1.0 - 15 / 20])
    assert apply_overlong([s], [1.0], "none", 100) == [1.0] and any(s.loss_mask)


def test_overlong_mask_drops_only_truncated_replies_from_the_loss():
    cut = Sample(response_token_ids=[1, 2], loss_mask=[1, 1], status=SampleStatus.TRUNCATED)
    done = Sample(response_token_ids=[1, 2], loss_mask=[1, 1], status=SampleStatus.COMPLETED)
    assert apply_overlong([cut, done], [0.3, 0.7], "mask", 2) == [0.3, 0.7]  # still in the group statistics
    assert not cut.trainable and done.loss_mask == [1, 1]


class FakeTrainer:
    def save_checkpoint(self, path):
        from pathlib import Path

        Path(path).mkdir(parents=True)


def test_keep_last_n_checkpoints(tmp_path):
    for step in range(5):
        save_checkpoint(tmp_path, step, FakeTrainer(), {"data": {"epoch": 0, "cursor": step}}, keep_last_n=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000004", "step_000005"]
    assert json.loads((latest_checkpoint(tmp_path) / "run_state.json").read_text())["next_step"] == 5
    for step in range(5, 7):
        save_checkpoint(tmp_path, step, FakeTrainer(), {}, keep_last_n=0)
    assert len(list((tmp_path / "checkpoints").iterdir())) == 4  # 0 keeps every one


@pytest.mark.parametrize("override,match", [
    ("rollout.top_p=0.9", "rollout.top_p=0.9 samples from a truncated distribution"),
    ("rollout.temperature=0", "rollout.temperature must be > 0"),
    ("train.grpo.temperature=0.5", "leave train.grpo.temperature unset"),
    ("rollout.overlong=penalty", "overlong_buffer"),
    ("train.grpo.tis_clip=-1", "tis_clip must be >= 0"),
])
def test_off_policy_settings_are_refused(tmp_path, override, match):
    base = tmp_path / "rl.yaml"
    base.write_text("model_path: /tmp/m\n")
    with pytest.raises(ConfigError, match=match):
        load_config(RLConfig, base, [override])


def test_top_p_is_fine_without_a_trainer(tmp_path):
    base = tmp_path / "rl.yaml"
    base.write_text("model_path: /tmp/m\n")
    cfg = load_config(RLConfig, base, ["rollout.top_p=0.9", "mode=rollout_only"])
    assert cfg.rollout.top_p == 0.9
    cfg = load_config(RLConfig, base, ["rollout.temperature=0.7"])  # the trainer follows the rollout
    from smart.ray.actor_group import train_config_for

    assert train_config_for(cfg.train, cfg.model_path, cfg.rollout.temperature).grpo.temperature == 0.7


class FakeActor(FakeTrainer):
    def train_step(self, samples, normalize_std, group_by, positive_only=False):
        return {"loss": 0.0}


class FakeTracker:
    def __init__(self):
        self.steps = []

    def log(self, step, metrics):
        self.steps.append(step)


@pytest.mark.parametrize("max_minutes, steps_run", [(1.0, [0, 1]), (0.0, [0, 1, 2, 3])])
def test_max_minutes_ends_the_loop_after_the_step_that_passes_it_with_a_checkpoint(tmp_path, monkeypatch,
                                                                                   max_minutes, steps_run):
    from smart import train as driver
    from smart.tracking import save_rollouts

    samples = [Sample(index=i, group_index=0, prompt_token_ids=[1], response_token_ids=[2], loss_mask=[1],
                      rollout_logprobs=[0.0], status=SampleStatus.COMPLETED, reward=float(i)) for i in range(2)]
    save_rollouts(tmp_path / "rollouts" / "step_00000.jsonl", samples)
    clock = iter(range(0, 10_000, 40))  # each step takes 40 s of the loop's clock
    monkeypatch.setattr(driver.time, "monotonic", lambda: next(clock))
    cfg = RLConfig(mode="train_only", replay_dir=str(tmp_path / "rollouts"), num_steps=4, save_every=0,
                   max_minutes=max_minutes)
    tracker = FakeTracker()
    driver.loop(cfg, tmp_path / "out", 0, FakeActor(), None, None, tracker)
    assert tracker.steps == steps_run  # 40 s < 60 s after step 0; 80 s >= 60 s after step 1: stop there
    assert latest_checkpoint(tmp_path / "out").name == f"step_{len(steps_run):06d}"  # saved as a last step is
    with pytest.raises(ConfigError, match="max_minutes must be >= 0"):
        RLConfig(model_path="m", max_minutes=-1).validate()


class ExportingActor(FakeActor):
    def export_hf(self, path):
        from pathlib import Path

        Path(path).mkdir(parents=True)
        (Path(path) / "config.json").write_text("{}")


def test_export_hf_every_writes_the_policy_over_training_but_not_the_last_step(tmp_path):
    from smart import train as driver
    from smart.tracking import save_rollouts

    samples = [Sample(index=i, group_index=0, prompt_token_ids=[1], response_token_ids=[2], loss_mask=[1],
                      rollout_logprobs=[0.0], status=SampleStatus.COMPLETED, reward=float(i)) for i in range(2)]
    save_rollouts(tmp_path / "rollouts" / "step_00000.jsonl", samples)
    cfg = RLConfig(mode="train_only", replay_dir=str(tmp_path / "rollouts"), num_steps=5, save_every=0,
                   export_hf_every=2)
    driver.loop(cfg, tmp_path / "out", 0, ExportingActor(), None, None, FakeTracker())
    exports = sorted(p.name for p in (tmp_path / "out" / "hf_steps").iterdir())
    assert exports == ["step_000002", "step_000004"]
    cfg.num_steps, cfg.out_dir = 4, str(tmp_path / "out4")
    driver.loop(cfg, tmp_path / "out4", 0, ExportingActor(), None, None, FakeTracker())
    exports = sorted(p.name for p in (tmp_path / "out4" / "hf_steps").iterdir())
    assert exports == ["step_000002"]  # step 4 is the last: its policy goes to out/hf, not hf_steps
    assert all((tmp_path / "out" / "hf_steps" / name / "config.json").is_file() for name in exports)
    with pytest.raises(ConfigError, match="export_hf_every must be >= 0"):
        RLConfig(model_path="m", export_hf_every=-1).validate()
