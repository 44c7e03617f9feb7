"""Every bundled problem is well-formed and non-degenerate, and every bundled solution is correct."""

from __future__ import annotations

import pytest
import torch

from kbencheval.dataset import load_bundled
from kbencheval.eval import EvalConfig, Evaluator
from kbencheval.eval.contract.inputs import as_tensor_list, build_model, load_problem_module, make_inputs
from kbencheval.eval.trusted.compare import compare

PROBLEMS = [p for level in (1, 2, 3) for p in load_bundled(level)]
CPU = torch.device("cpu")


def test_suite_size():
    counts = {level: sum(p.level == level for p in PROBLEMS) for level in (1, 2, 3)}
    assert counts[1] >= 24 and counts[2] >= 12 and counts[3] >= 4, counts
    assert all(p.solution_source for p in PROBLEMS), [p.key for p in PROBLEMS if not p.solution_source]
    assert all(p.small_sizes for p in PROBLEMS), [p.key for p in PROBLEMS if not p.small_sizes]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_reference_is_not_degenerate(problem):
    """The output depends on the input, and neither zeros nor a constant passes the judge's own comparison
    (its per-dtype tolerance on the output's real dtype, or the problem's TOLERANCE)."""
    module = load_problem_module(problem.source, problem.small_sizes)
    model = build_model(module.Model, module, {"init": 42, "model": 43}, CPU)
    with torch.no_grad():
        first = as_tensor_list(model(*make_inputs(module, 1, CPU)))
        second = as_tensor_list(model(*make_inputs(module, 2, CPU)))
    for i, (a, b) in enumerate(zip(first, second)):
        assert not compare([a], [b], problem.tolerance)[0], f"output {i} does not depend on the input"
        constants = [torch.zeros_like(a)]
        if a.numel() > 1:  # a scalar output is covered by the input-dependence check above
            constants.append(torch.full_like(a, float(a.double().mean())))
        for constant in constants:
            assert not compare([a], [constant], problem.tolerance)[0], f"a constant output {i} would pass"


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(EvalConfig(device="cpu", trials=2, timeout_s=240)) as ev:
        yield ev


@pytest.mark.slow  # all 40 solutions under the Triton interpreter: minutes
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_bundled_solution_is_correct(evaluator, problem):
    result = evaluator.evaluate(problem, "```python\n" + problem.solution_source + "```")
    assert result.status.value == "correct", f"{problem.key}: {result.error}"
    assert result.speedup is None and not result.timing_meaningful  # the interpreter's timings mean nothing
