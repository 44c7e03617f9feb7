"""Plugins by dotted path, generate-function contracts, configs.   pytest tests/smart/test_smart_plugins.py

The generate functions run against a fake engine and a fake evaluator (CPU, no Ray, no model):
exactly the RolloutContext contract a plugin gets.
"""

from pathlib import Path

import pytest

from kbencheval.eval import EvalResult, Status
from kbencheval.llm.base import Completion
from smart.config import ConfigError, RLConfig, RolloutConfig, load_config, load_plugin
from smart.rollout.generate import RolloutContext, generate_multi_turn, generate_single_turn, turn_glue
from smart.sample import Sample, SampleStatus

REPO = Path(__file__).resolve().parents[2]


def reward_len(cfg, samples):  # a reward_fn plugin used below
    return [float(len(s.response_token_ids)) for s in samples]


class FakeTokenizer:
    """Character-level ids; the chat template is Qwen-like and only appends."""

    eos_token, eos_token_id = "<E>", 0

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        text = "".join(f"<{m['role']}>{m['content']}<E>" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=False):
        ids, i = [], 0
        while i < len(text):
            if text.startswith("<E>", i):
                ids.append(0)
                i += 3
            else:
                ids.append(ord(text[i]))
                i += 1
        return {"input_ids": ids}


def make_ctx(max_turns, replies, verdicts):
    """replies[t] / verdicts[t]: per-turn lists (one per active trajectory) of texts / 'correct'|'incorrect'."""
    calls = {"gen": 0, "eval": 0, "prompts": []}

    def generate(prompts):
        texts = replies[calls["gen"]]
        calls["gen"] += 1
        calls["prompts"].append(prompts)
        return [Completion(text=t, token_ids=[ord(c) for c in t] + [0], logprobs=[-0.5] * (len(t) + 1), finish_reason="stop")
                for t in texts]

    def evaluate(items):
        out = verdicts[calls["eval"]]
        calls["eval"] += 1
        return [EvalResult(status=Status(v), compiled=True, correct=v == "correct", feedback=f"fb{i}")
                for i, v in enumerate(out)]

    cfg = RolloutConfig(max_turns=max_turns)
    return RolloutContext(cfg, FakeTokenizer(), generate, evaluate, lambda r: r.feedback), calls


def starts(n):
    return [Sample(index=i, group_index=0, problem_key="L1_1_ReLU", prompt_token_ids=[1, 2, 3]) for i in range(n)]


def test_load_plugin_accepts_colon_and_dot_forms():
    assert load_plugin("tests.smart.test_smart_plugins:reward_len", "reward.reward_fn") is reward_len
    keep = load_plugin("smart.rollout.filters.keep_varied_rewards", "rollout.filter_fn")
    assert keep([Sample(reward=0.0), Sample(reward=1.0)]) is True and keep([Sample(reward=1.0)] * 2) is False


@pytest.mark.parametrize("path, match", [("nodots", "not a dotted path"), ("no_such_mod:f", "cannot import"),
                                          ("smart.rollout.filters:nope", "has no function")])
def test_load_plugin_errors_name_the_fix(path, match):
    with pytest.raises(ConfigError, match=match):
        load_plugin(path, "rollout.filter_fn")


def test_single_turn_keeps_engine_tokens_and_marks_failures():
    ctx, _ = make_ctx(1, [["ab"]], [])
    ctx.generate = lambda prompts: [Completion(text="ab", token_ids=[97, 98, 0], logprobs=[-1.0, -2.0, -3.0], finish_reason="stop"),
                                    Completion(text="", error="out of memory")]
    ok, failed = generate_single_turn(ctx, starts(2))
    assert ok.response_token_ids == [97, 98, 0] and ok.rollout_logprobs == [-1.0, -2.0, -3.0] and ok.loss_mask == [1, 1, 1]
    assert ok.status == SampleStatus.COMPLETED and ok.trainable
    assert failed.status == SampleStatus.FAILED and not failed.trainable
    assert failed.eval_result.status == Status.FORMAT_ERROR


def test_turn_glue_skips_the_end_token_the_model_already_sampled():
    tok = FakeTokenizer()
    assert turn_glue(tok, "fix it", ended_with_eos=True) == tok("<user>fix it<E><assistant>")["input_ids"]
    assert turn_glue(tok, "fix it", ended_with_eos=False) == tok("<E><user>fix it<E><assistant>")["input_ids"]


def test_multi_turn_masks_context_and_stops_when_correct():
    # two trajectories: #0 is correct at turn 0 and stops; #1 is wrong, gets feedback, then a second turn
    ctx, calls = make_ctx(3, [["aa", "bb"], ["cc"], ["dd"]], [["correct", "incorrect"], ["incorrect"], ["correct"]])
    out = generate_multi_turn(ctx, starts(2))
    assert [(s.trajectory_id, s.turn) for s in out] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    t0, t1, t2 = out[1], out[2], out[3]
    glue = FakeTokenizer()("<user>fb1<E><assistant>")["input_ids"]
    assert t1.response_token_ids == t0.response_token_ids + glue + [ord("c"), ord("c"), 0]
    assert t1.loss_mask == [0] * (len(t0.response_token_ids) + len(glue)) + [1, 1, 1]
    assert t1.rollout_logprobs[: len(t0.response_token_ids)] == [0.0] * len(t0.response_token_ids)
    assert calls["prompts"][1] == [[1, 2, 3] + t0.response_token_ids + glue]  # exact ids fed back, nothing re-tokenized
    assert t2.loss_mask.count(1) == 3 and t2.eval_result.correct
    for s in out:
        s.validate()


def test_rl_config_rejects_unknown_keys_and_bad_modes():
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", ["rollout.max_turn=2"])
    with pytest.raises(ConfigError, match="replay_dir"):
        load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", ["mode=train_only"])
    with pytest.raises(ConfigError, match="rollout_num_engines"):
        load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", ["cluster.rollout_num_engines=2"])
    cfg = load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", ["rollout.max_turns=3", "train.grpo.kl_type=k1"])
    assert cfg.rollout.max_turns == 3 and cfg.train.grpo.kl_type == "k1"


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.yaml")
                                        if p.name.startswith(("rl_", "sft_"))))
def test_shipped_configs_load(name):
    from smart.config import SFTConfig

    cls = RLConfig if name.startswith("rl_") else SFTConfig
    load_config(cls, REPO / "configs" / name)


def test_run_seed_orders_the_problems_and_leaves_the_split_alone():
    from smart.config import DataConfig
    from smart.rollout.data import DataSource

    cfg = DataConfig(levels=[1], heldout_fraction=0.2)
    a, b, c = DataSource(cfg, seed=0), DataSource(cfg, seed=0), DataSource(cfg, seed=1)
    assert [p.key for p in a.heldout] == [p.key for p in c.heldout]  # the split is data.split_seed's alone

    def order(ds):
        return [p.key for p in ds.next_problems(10)]

    assert order(a) == order(b) and order(a) != order(c)
