"""The asynchronous driver (smart/train_async.py): the staleness bookkeeping alone (fast), then a real
three-step run on CPU (slow: real Ray, the embedded engine, the evaluator, the torch trainer).

    pytest -q tests/smart/test_train_async.py                  # bookkeeping, config errors
    pytest -q -m slow tests/smart/test_train_async.py -s       # ~1 min on 2 CPU cores
"""

from __future__ import annotations

from pathlib import Path

import pytest

from smart.config import ConfigError, RLConfig, load_config
from smart.train_async import StalenessBound, check_async, launch_allowed, sample_staleness

REPO = Path(__file__).resolve().parents[2]


def _simulate(max_staleness: int, num_steps: int, trains=lambda step: True) -> dict:
    """Drive launch_allowed as the driver does; a rollout generates with the weights served at launch
    (a sync waits for rollouts in flight, so weights never change between launch and generation)."""
    bound = StalenessBound(max_staleness, next_launch=0, next_train=0)
    served_at_launch, staleness, overlapped, syncs = {}, {}, {}, 0

    def launch(step):
        assert step not in served_at_launch
        served_at_launch[step] = bound.served

    for step in range(num_steps):
        syncs += launch_allowed(bound, num_steps, launch, lambda: None)
        assert step in served_at_launch, "the step about to train must have been launched"
        if trains(step):
            staleness[step] = bound.updates - served_at_launch[step]
            overlapped[step] = step + 1 in served_at_launch  # next rollout in flight while this step trains
            bound.updates += 1
        bound.next_train = step + 1
    return {"staleness": staleness, "overlapped": overlapped, "syncs": syncs, "launched": sorted(served_at_launch)}


def test_staleness_zero_is_the_synchronous_loop():
    sim = _simulate(0, 4)
    assert sim["staleness"] == {0: 0, 1: 0, 2: 0, 3: 0}
    assert not any(sim["overlapped"].values())
    assert sim["syncs"] == 3 and sim["launched"] == [0, 1, 2, 3]  # no sync after the last step: nothing to launch


def test_staleness_one_overlaps_every_step_but_the_last():
    sim = _simulate(1, 4)
    assert sim["staleness"] == {0: 0, 1: 1, 2: 1, 3: 1}
    assert sim["overlapped"] == {0: True, 1: True, 2: True, 3: False}
    assert sim["syncs"] == 2


@pytest.mark.parametrize("max_staleness", [0, 1, 2, 3])
@pytest.mark.parametrize("pattern", ["all", "even", "none_after_1"])
def test_bound_holds_when_steps_skip_training(max_staleness, pattern):
    trains = {"all": lambda s: True, "even": lambda s: s % 2 == 0, "none_after_1": lambda s: s <= 1}[pattern]
    sim = _simulate(max_staleness, 7, trains)
    assert max(sim["staleness"].values()) <= max_staleness
    assert sim["launched"] == list(range(7))
    if pattern == "all":
        assert max(sim["staleness"].values()) == max_staleness  # the bound is used, not just respected


def test_sample_staleness_counts_trainer_updates():
    assert sample_staleness([0, 0, 1, 2], [0, 1, 2]) == [2, 2, 1, 0]
    assert sample_staleness([4, 2], [2, 4]) == [0, 1]  # num_steps_per_rollout=2: versions advance by 2
    with pytest.raises(RuntimeError, match="never had"):
        sample_staleness([3], [0, 1])


def _cfg(*overrides: str) -> RLConfig:
    return load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", ["model_path=gpt2", *overrides])


def test_async_config_errors_name_the_fix():
    with pytest.raises(ConfigError, match="set train.grpo.tis_clip=2"):
        check_async(_cfg("max_staleness=1"))
    with pytest.raises(ConfigError, match="use smart rl"):
        check_async(_cfg("mode=rollout_only", "train.grpo.tis_clip=2"))
    with pytest.raises(ConfigError, match="max_staleness must be >= 0"):
        _cfg("max_staleness=-1")
    check_async(_cfg("max_staleness=1", "train.grpo.tis_clip=2"))
    check_async(_cfg("max_staleness=0"))  # on-policy: nothing to correct


def test_async_driver_names_no_engine_or_backend():
    driver = (REPO / "smart" / "train_async.py").read_text().lower()
    for name in ("sglang", "embedded", "torch", "megatron", "fsdp"):
        assert name not in driver, f"smart/train_async.py names {name!r}"


# ---------------------------------------------------------------- real run (slow)

def _scalars(out: Path) -> dict[str, dict[int, float]]:
    from smart.tracking import read_scalars

    return read_scalars(out / "tb")


@pytest.mark.slow
def test_async_run_overlaps_bounds_staleness_and_corrects_it(tmp_path, local_ray, tiny_model):
    from smart.tracking import load_rollouts
    from smart.train_async import train

    out = tmp_path / "async"
    final = train(load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", [
        f"model_path={tiny_model}", f"out_dir={out}", "num_steps=3", "seed=3", "max_staleness=1",
        "rollout.prompts_per_step=2", "rollout.n_samples_per_prompt=2", "rollout.max_new_tokens=12",
        "rollout.max_turns=1", "rollout.temperature=1.0", "rollout.filter_fn=",
        "reward.reward_fn=smart.reward.controls:length_reward", "train.lr=1e-2", "train.grpo.tis_clip=2",
        "export_hf=false", "save_every=1", "keep_last_n=1"]))
    m = _scalars(out)

    # Every sample records the weights that generated it: step 0 the initial ones, step n those after step n-1.
    for step in range(3):
        samples = load_rollouts(out / "rollouts" / f"step_{step:05d}.jsonl")
        assert {s.weight_version for s in samples} == {max(0, step - 1)}, step
    assert m["async/staleness_max"] == {0: 0.0, 1: 1.0, 2: 1.0}
    assert m["async/staleness_mean"] == {0: 0.0, 1: 1.0, 2: 1.0}

    # Generation of step n+1 ran while step n trained.
    for n in (0, 1):
        r0, r1 = m["timeline/rollout_start_s"][n + 1], m["timeline/rollout_end_s"][n + 1]
        t0, t1 = m["timeline/train_start_s"][n], m["timeline/train_end_s"][n]
        assert r0 < t1 and t0 < r1, (n, (r0, r1), (t0, t1))
        assert m["async/overlap_s"][n + 1] > 0

    # TIS acts: logged every step; the stale steps show the off-policy gap the on-policy step lacks.
    assert sorted(m["train/tis_mean"]) == sorted(m["train/tis_clip_frac"]) == [0, 1, 2]
    gap = m["train/logprob_mismatch_mean"]
    assert gap[0] < 1e-3 and gap[1] > 10 * gap[0] and gap[2] > 10 * gap[0], gap
    assert m["train/tis_mean"][1] != pytest.approx(1.0, abs=1e-4)

    # The engines end on the trainer's final weights; the checkpoint resumes after step 3.
    assert final["train/weights_version"] == final["async/engines_version_min"] == 3.0
    assert (out / "checkpoints" / "step_000003" / "run_state.json").is_file()
    print({k: {s: round(v, 4) for s, v in vals.items()} for k, vals in m.items()
           if k.startswith(("time/", "async/", "timeline/", "train/tis", "train/logprob"))})
