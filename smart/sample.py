"""`Sample`: the one shape that crosses from rollout to training.

    s = Sample(index=0, group_index=0, problem_key="L1_19_ReLU", prompt=msgs,
               prompt_token_ids=p, response_token_ids=r, loss_mask=[1] * len(r),
               rollout_logprobs=lp, response_text=text)
    Sample.from_json(s.to_json()) == s

Token ids and logprobs are the exact ones the engine produced; nothing downstream re-tokenizes.
A multi-turn sample keeps the whole conversation after the first prompt in `response_token_ids`:
tokens the environment wrote (feedback turns, chat-template glue) have loss_mask 0, tokens the model
sampled have loss_mask 1, so the trainer's per-token mask is exact.

`eval_result` is the typed `EvalResult`; `to_json` writes it as its own JSON object and `from_json`
reads it back, so saved rollouts replay with the same verdicts.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any

from kbencheval.eval import EvalResult


class SampleStatus(str, enum.Enum):
    PENDING = "pending"  # not generated yet
    COMPLETED = "completed"  # the model stopped on its own (EOS / stop string)
    TRUNCATED = "truncated"  # hit max tokens; still trainable
    FAILED = "failed"  # generation itself failed: never trained on as text


class SampleError(ValueError):
    """A Sample whose fields disagree; the message names the field to fix."""


@dataclasses.dataclass
class Sample:
    index: int = 0
    group_index: int = 0  # samples of one prompt share it; GRPO normalizes within a group
    problem_key: str = ""
    turn: int = 0  # 0-based turn of a multi-turn rollout this sample ends at
    trajectory_id: int | None = None  # turns of one multi-turn trajectory share it; None: its own trajectory
    prompt: list[dict[str, str]] | str = ""
    prompt_token_ids: list[int] = dataclasses.field(default_factory=list)
    response_token_ids: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)  # 1 = trained on
    rollout_logprobs: list[float] = dataclasses.field(default_factory=list)  # 0.0 where loss_mask is 0
    response_text: str = ""
    turn_reward: float | None = None  # this turn's shaped reward r_t, before discounting
    reward: float | None = None  # what GRPO uses: the discounted return R_t = r_t + gamma * R_{t+1}
    status: SampleStatus = SampleStatus.PENDING
    weight_version: int | None = None  # the policy version the engine sampled with (the trainer's step)
    eval_result: EvalResult | None = None  # the evaluator's verdict on response_text
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)  # for plugins only; smart never reads it

    @property
    def trainable(self) -> bool:
        """Failed generations carry no model text worth a gradient."""
        return self.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED) and any(self.loss_mask)

    @property
    def total_len(self) -> int:
        return len(self.prompt_token_ids) + len(self.response_token_ids)

    def validate(self) -> None:
        n = len(self.response_token_ids)
        if len(self.loss_mask) != n:
            raise SampleError(
                f"sample {self.index}: loss_mask has {len(self.loss_mask)} entries but there are {n} response "
                "tokens; give one mask entry per response token"
            )
        if self.rollout_logprobs and len(self.rollout_logprobs) != n:
            raise SampleError(
                f"sample {self.index}: rollout_logprobs has {len(self.rollout_logprobs)} entries but there are "
                f"{n} response tokens; give one logprob per response token (0.0 where loss_mask is 0)"
            )

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["eval_result"] = None if self.eval_result is None else self.eval_result.to_dict()
        return d

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, d: dict) -> "Sample":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise SampleError(f"sample dict has unknown keys {sorted(unknown)}; valid keys: {sorted(known)}")
        d = dict(d)
        if "status" in d:
            d["status"] = SampleStatus(d["status"])
        if isinstance(d.get("eval_result"), dict):
            d["eval_result"] = EvalResult.from_dict(d["eval_result"])
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "Sample":
        return cls.from_dict(json.loads(text))
