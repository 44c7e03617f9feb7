"""benchmarks/megatron_parallel_parity.py's comparison, on the CPU (the script itself needs two GPUs).

    pytest -q tests/smart/test_megatron_parity_compare.py
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from megatron_parallel_parity import compare, make_samples, within_bounds  # noqa: E402


def test_compare_reports_max_and_mean_over_every_token():
    row = compare([[-1.0, -2.0], [-3.0]], [[-1.1, -2.0], [-2.7]])
    assert row["tokens"] == 3
    assert row["max_abs"] == pytest.approx(0.3) and row["mean_abs"] == pytest.approx(0.4 / 3)
    assert within_bounds({"max_abs": 0.1, "mean_abs": 0.01}) and not within_bounds({"max_abs": 0.3, "mean_abs": 0.01})


def test_compare_refuses_layouts_that_scored_different_tokens():
    with pytest.raises(ValueError, match="shape"):
        compare([[-1.0, -2.0]], [[-1.0]])


def test_samples_are_the_same_on_every_rank():
    a, b = make_samples(4, 1000), make_samples(4, 1000)
    assert [s.prompt_token_ids + s.response_token_ids for s in a] == [s.prompt_token_ids + s.response_token_ids for s in b]
