"""Sample contract: JSON round trip and field checks.   pytest tests/smart/test_sample.py"""

import json

import pytest

from kbencheval.eval import EvalResult, Status
from smart.sample import Sample, SampleError, SampleStatus


def _multi_turn_sample() -> Sample:
    # turn 0 model tokens [5, 6], environment feedback [7, 8, 9], turn 1 model tokens [10, 11]
    return Sample(
        index=3,
        group_index=1,
        problem_key="L1_19_ReLU",
        turn=1,
        prompt=[{"role": "user", "content": "write a kernel"}],
        prompt_token_ids=[1, 2, 3],
        response_token_ids=[5, 6, 7, 8, 9, 10, 11],
        loss_mask=[1, 1, 0, 0, 0, 1, 1],
        rollout_logprobs=[-0.5, -0.25, 0.0, 0.0, 0.0, -1.5, -0.125],
        response_text="```python\n...```",
        reward=0.3,
        status=SampleStatus.COMPLETED,
        trajectory_id=3,
        turn_reward=0.1,
        eval_result=EvalResult(status=Status.CORRECT, problem="L1_19_ReLU", compiled=True, correct=True, speedup=1.5),
        metadata={"plugin_note": [0.1, 0.3]},
    )


def test_json_round_trip_is_exact():
    s = _multi_turn_sample()
    text = s.to_json()
    back = Sample.from_json(text)
    assert back == s
    assert back.status is SampleStatus.COMPLETED
    assert json.loads(text)["status"] == "completed"
    assert isinstance(back.eval_result, EvalResult) and back.eval_result.status is Status.CORRECT
    assert json.loads(text)["eval_result"]["status"] == "correct"  # the verdict travels as its own JSON object
    assert (back.trajectory_id, back.turn_reward, back.eval_result.speedup) == (3, 0.1, 1.5)
    assert Sample.from_dict(s.to_dict()) == s


def test_string_prompt_and_defaults_round_trip():
    s = Sample(index=0, prompt="plain text prompt", status=SampleStatus.FAILED)
    assert Sample.from_json(s.to_json()) == s


def test_validate_rejects_mask_length_mismatch():
    s = _multi_turn_sample()
    s.validate()
    s.loss_mask = s.loss_mask[:-1]
    with pytest.raises(SampleError, match="loss_mask"):
        s.validate()


def test_validate_rejects_logprob_length_mismatch():
    s = _multi_turn_sample()
    s.rollout_logprobs = [0.0]
    with pytest.raises(SampleError, match="rollout_logprobs"):
        s.validate()


def test_unknown_key_is_an_error():
    d = _multi_turn_sample().to_dict()
    d["rewrad"] = 1.0
    with pytest.raises(SampleError, match="unknown keys"):
        Sample.from_dict(d)


@pytest.mark.parametrize(
    "status,mask,trainable",
    [
        (SampleStatus.COMPLETED, [1, 0], True),
        (SampleStatus.TRUNCATED, [1], True),
        (SampleStatus.FAILED, [1], False),  # a failed generation is never trained on as text
        (SampleStatus.COMPLETED, [0, 0], False),
    ],
)
def test_trainable(status, mask, trainable):
    s = Sample(response_token_ids=[4] * len(mask), loss_mask=mask, status=status)
    assert s.trainable is trainable
