"""python -m pytest tests/data/test_prompts.py -q"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbencheval.eval import EvalResult, Status
from kbencheval.prompts import BACKENDS, EXAMPLES, STYLES, build_prompt, feedback_message, strip_thinking

REPO = Path(__file__).resolve().parents[2]
RELU = (REPO / "kbencheval/problems/level1/1_ReLU.py").read_text()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("style", STYLES)
def test_prompt_has_problem_and_instruction(backend, style):
    messages = build_prompt(RELU, backend=backend, style=style)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert RELU.strip() in user
    assert "class ModelNew(nn.Module)" in user and "```python" in user
    assert ("@triton.jit" in user) == (backend == "triton")
    assert ("load_inline" in user) == (backend == "cuda")
    # The problem comes last, after the examples, so the model answers it and not an example.
    assert user.index(RELU.strip()) > user.rfind("Answer:")


def test_styles_add_examples():
    counts = [build_prompt(RELU, style=s)[1]["content"].count("Answer:") for s in STYLES]
    assert counts == [0, 1, 2]


def test_optional_notes_and_bad_choices():
    user = build_prompt(RELU, precision="bfloat16", gpu_notes="H100, 132 SMs")[1]["content"]
    assert "bfloat16" in user and "H100, 132 SMs" in user
    with pytest.raises(ValueError, match="triton, cuda"):
        build_prompt(RELU, backend="tilelang")
    with pytest.raises(ValueError, match="zero_shot"):
        build_prompt(RELU, style="two_shot")


_RUN_EXAMPLE = """
import json, sys, torch
ref_src, new_src = json.loads(sys.stdin.read())
ref, new = {}, {}
exec(ref_src, ref); exec(new_src, new)
torch.manual_seed(0)
x = torch.randn(5, 37)
want, got = ref["Model"]()(x), new["ModelNew"]()(x)
assert torch.allclose(want, got, atol=1e-5, rtol=1e-5), (want - got).abs().max()
print("ok")
"""


@pytest.mark.parametrize("index", range(len(EXAMPLES["triton"])))
def test_triton_examples_are_correct(index):
    # The examples teach the format; a wrong one would teach the model wrong code. Interpreter on CPU.
    ref, answer = EXAMPLES["triton"][index]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _RUN_EXAMPLE], input=json.dumps([ref, answer]),
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("status", list(Status))
def test_feedback_for_every_status(status):
    result = EvalResult(status=status, error=f"detail-{status.value}", speedup=1.3 if status == Status.CORRECT else None)
    text = feedback_message(result)
    assert text.endswith("```python block.")
    assert feedback_message(result.to_dict()) == text  # dicts (JSON from workers) work the same
    if status == Status.CORRECT:
        assert "1.30x" in text and "faster" in text
    else:
        assert f"detail-{status.value}" in text


def test_feedback_prefers_model_text_and_truncates():
    result = EvalResult(status=Status.INCORRECT, error="short", feedback="max abs diff 0.5 at [0, 3]")
    assert "max abs diff 0.5" in feedback_message(result) and "short" not in feedback_message(result)
    long = feedback_message(EvalResult(status=Status.RUNTIME_ERROR, error="x" * 5000), max_chars=100)
    assert "[truncated]" in long and len(long) < 400
    slow = feedback_message(EvalResult(status=Status.CORRECT, speedup=0.5))
    assert "0.50x" in slow and "slower" in slow
    untimed = feedback_message(EvalResult(status=Status.CORRECT))
    assert "not measured" in untimed


@pytest.mark.parametrize("text, want", [
    ("<think>plan</think>\n```python\ncode\n```", "```python\ncode\n```"),
    ("a<think>x</think>b<think>y\n</think>c", "abc"),
    ("reasoning from a template-opened block</think>answer", "answer"),
    ("<think>ran out of tokens mid-thought", ""),
    ("answer <think>unterminated", "answer"),
    ("no thinking at all", "no thinking at all"),
])
def test_strip_thinking(text, want):
    assert strip_thinking(text) == want
