"""scripts/learning_compare.py's per-style measure: which way a checkpoint's sampled kernels write the expression
(synth.solution_style mixed trains on both), read from an evaluation folder's generations and results."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import learning_compare  # noqa: E402

SSA = "```python\n@triton.jit\ndef k(x_ptr):\n    x0 = tl.load(x_ptr)\n    t1 = (x0 * 2.0)\n    t2 = t1 + 1.0\n```"
INLINE = "```python\n@triton.jit\ndef k(x_ptr):\n    x0 = tl.load(x_ptr)\n    y = ((x0 * 2.0) + 1.0)\n```"


def test_style_of_tells_the_two_ways_apart():
    assert learning_compare.style_of(SSA) == "ssa"
    assert learning_compare.style_of(INLINE) == "inline"
    assert learning_compare.style_of("no code here") == "none"
    assert learning_compare.style_of(INLINE.replace("y = ", "wt1 = ")) == "inline"  # t1 as a whole name only


def test_sample_shares_counts_each_style_and_its_pass_rate(tmp_path):
    samples = [("L1_1_A", 0, SSA, True), ("L1_1_A", 1, SSA, False), ("L1_2_B", 0, INLINE, True),
               ("L1_2_B", 1, INLINE, True)]
    for key, k, text, _ in samples:
        folder = tmp_path / "generations" / key
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"sample_{k}.json").write_text(json.dumps({"problem_key": key, "sample": k, "text": text}))
    (tmp_path / "results.jsonl").write_text("".join(
        json.dumps({"problem_key": key, "sample": k, "correct": ok, "status": "correct" if ok else "compile_error"})
        + "\n" for key, k, _, ok in samples))
    with (tmp_path / "results.jsonl").open("a") as f:
        f.write('{"problem_key": "L1_1_A", "sam')  # a line torn by a killed writer is skipped, not fatal
    assert learning_compare.sample_shares(tmp_path) == {
        "inline": {"share": 0.5, "pass@1": 1.0, "failures": {}},
        "ssa": {"share": 0.5, "pass@1": 0.5, "failures": {"compile_error": 1}}}
    # a sample whose verdict line is missing failed, and says so
    (tmp_path / "generations" / "L1_2_B" / "sample_2.json").write_text(
        json.dumps({"problem_key": "L1_2_B", "sample": 2, "text": INLINE}))
    assert learning_compare.sample_shares(tmp_path)["inline"] == {"share": 0.6, "pass@1": 0.6667,
                                                                  "failures": {"no verdict": 1}}
    assert learning_compare.sample_shares(tmp_path / "missing") == {}
