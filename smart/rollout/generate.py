"""Generate functions: turn pending Samples into generated (and, multi-turn, evaluated) Samples.

Plugin signature (rollout.generate_fn):  generate_fn(ctx: RolloutContext, samples: list[Sample]) -> list[Sample]
It takes the whole step's batch rather than one sample (slime's per-sample form) because the
embedded engine samples a batch in one pass; a per-sample plugin is a loop inside this one.

Token ids and logprobs are the engine's own; only text the environment writes (feedback turns and
chat-template glue) is ever tokenized, and it gets loss_mask 0.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable

from kbencheval.eval import EvalResult, Status
from kbencheval.llm.base import Completion
from smart.config import RolloutConfig
from smart.sample import Sample, SampleStatus


@dataclasses.dataclass
class RolloutContext:
    """What a generate function may use. The rollout manager builds it; tests build it with fakes."""

    cfg: RolloutConfig
    tokenizer: object
    generate: Callable[[list[list[int]]], list[Completion]]
    """prompt token ids -> one Completion per row (engine batches, sampling params from cfg)."""
    evaluate: Callable[[list[tuple[str, str]]], list[EvalResult]]
    """(problem_key, model text) pairs -> EvalResults; never raises for a bad candidate."""
    feedback: Callable[[EvalResult], str]
    """EvalResult -> the next user turn's text (kbencheval.prompts.feedback_message)."""


def apply_completion(sample: Sample, c: Completion, context_ids: list[int]) -> None:
    """Append one model turn after `context_ids` (earlier turns + glue, all loss_mask 0)."""
    sample.response_token_ids = list(context_ids) + list(c.token_ids or [])
    sample.loss_mask = [0] * len(context_ids) + [1] * len(c.token_ids or [])
    sample.rollout_logprobs = [0.0] * len(context_ids) + list(c.logprobs or [])
    sample.response_text = c.text
    if c.error or not c.token_ids:
        # A failed generation is scored as a format error and never trained on as text.
        sample.status = SampleStatus.FAILED
        sample.loss_mask = [0] * len(sample.response_token_ids)
        sample.metadata["generation_error"] = c.error or "engine returned no tokens"
        sample.eval_result = EvalResult(
            status=Status.FORMAT_ERROR, problem=sample.problem_key, error=f"generation failed: {c.error}"[:300])
    else:
        sample.status = SampleStatus.COMPLETED if c.finish_reason == "stop" else SampleStatus.TRUNCATED


def generate_single_turn(ctx: RolloutContext, samples: list[Sample]) -> list[Sample]:
    completions = ctx.generate([s.prompt_token_ids for s in samples])
    for s, c in zip(samples, completions):
        apply_completion(s, c, [])
    return samples


def turn_glue(tokenizer, feedback: str, ended_with_eos: bool) -> list[int]:
    """Token ids that close the model's turn, add the feedback as a user turn and open the next reply.

    Rendered from the chat template with placeholder messages, so any template that only appends works.
    """
    marker_a, marker_u = "\x00ASSISTANT\x00", "\x00FEEDBACK\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker_a}, {"role": "user", "content": marker_u}],
        add_generation_prompt=True,
        tokenize=False,
    )
    glue = text[text.index(marker_a) + len(marker_a) :].replace(marker_u, feedback)
    eos_text = tokenizer.eos_token or ""
    if ended_with_eos and eos_text and glue.startswith(eos_text):
        glue = glue[len(eos_text) :]  # the model already sampled its end-of-turn token
    return tokenizer(glue, add_special_tokens=False)["input_ids"]


def is_done(result: EvalResult, stop_speedup: float) -> bool:
    """Correct and fast enough; with no timing (CPU interpreter) correct is enough."""
    if not result.correct:
        return False
    return result.speedup is None or result.speedup >= stop_speedup


def generate_multi_turn(ctx: RolloutContext, samples: list[Sample]) -> list[Sample]:
    """Kevin-style refinement: up to max_turns replies per trajectory, each evaluated, its feedback fed back.

    Returns one Sample per turn taken. The sample of turn t holds the whole conversation after the
    first prompt, with loss_mask 1 only on turn t's sampled tokens, so each model token is trained
    exactly once, under its own turn's discounted return (filled in by the reward stage).
    """
    out: list[Sample] = []
    active = [(s, []) for s in samples]  # (trajectory start, ids after the first prompt)
    for s in samples:
        s.trajectory_id = s.index
    for turn in range(ctx.cfg.max_turns):
        if not active:
            break
        completions = ctx.generate([s.prompt_token_ids + ctx_ids for s, ctx_ids in active])
        turn_samples = []
        for (start, ctx_ids), c in zip(active, completions):
            t = copy.deepcopy(start)
            t.turn = turn
            apply_completion(t, c, ctx_ids)
            turn_samples.append(t)
        to_eval = [t for t in turn_samples if t.eval_result is None]
        for t, result in zip(to_eval, ctx.evaluate([(t.problem_key, t.response_text) for t in to_eval])):
            t.eval_result = result
        out += turn_samples
        next_active = []
        for (start, _), t in zip(active, turn_samples):
            if t.status == SampleStatus.FAILED or is_done(t.eval_result, ctx.cfg.stop_speedup):
                continue
            eos_ids = {ctx.tokenizer.eos_token_id}
            ended = bool(t.response_token_ids) and t.response_token_ids[-1] in eos_ids
            glue = turn_glue(ctx.tokenizer, ctx.feedback(t.eval_result), ended)
            next_active.append((start, t.response_token_ids + glue))
        active = next_active
    return out
