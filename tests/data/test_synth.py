"""kbench synth: determinism, the operator-pair split, the folder layout, static checks and verification."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from kbencheval.config import ConfigError
from kbencheval.dataset import load_local
from kbencheval.extract import static_check
from kbencheval.synth import SynthConfig, generate, static_filter, verify, write
from kbencheval.synth.build import heldout_pair_set
from kbencheval.synth.grammar import INLINE_HELPERS, operator_pairs, to_torch, to_triton_inline
from kbencheval.synth.render import solution_variants
from tests.support import ENV


def test_generation_is_deterministic_in_the_seed():
    a = generate(SynthConfig(n=40, seed=3))
    b = generate(SynthConfig(n=40, seed=3))
    c = generate(SynthConfig(n=40, seed=4))
    assert [(p.key, p.source, p.variants) for p in a] == [(p.key, p.source, p.variants) for p in b]
    assert [p.source for p in a] != [p.source for p in c]


def test_max_variants_keeps_the_first_variants_canonical_first():
    every = generate(SynthConfig(n=20, seed=5))
    capped = generate(SynthConfig(n=20, seed=5, max_variants=2))
    for full, two in zip(every, capped):
        assert list(two.variants.items()) == list(full.variants.items())[:2]


def test_heldout_problems_and_only_they_contain_a_heldout_pair():
    cfg = SynthConfig(n=300, seed=0, heldout_fraction=0.25)
    problems = generate(cfg)
    held = heldout_pair_set(cfg)
    train = [p for p in problems if p.split == "train"]
    heldout = [p for p in problems if p.split == "heldout"]
    assert len(heldout) == 75 and len(train) == 225
    for p in problems:  # recomputed from the tree, not read from the stored field
        hit = operator_pairs(p.spec.tree, p.spec.tail) & held
        assert bool(hit) == (p.split == "heldout"), p.key
    train_pairs = set().union(*(set(p.pairs) for p in train))
    assert not train_pairs & held  # whole pairs are held out, not instances
    assert len({p.key for p in problems}) == len(problems)  # keys unique across splits
    assert len({(p.spec.tree.canonical(), p.spec.tail) for p in problems}) == len(problems)


def test_test_split_is_in_distribution_and_never_trained_on(tmp_path):
    cfg = SynthConfig(n=300, seed=0, heldout_fraction=0.1, test_fraction=0.2)
    problems = generate(cfg)
    by_split = {s: [p for p in problems if p.split == s] for s in ("train", "test", "heldout")}
    assert {s: len(v) for s, v in by_split.items()} == {"train": 210, "test": 60, "heldout": 30}
    held = heldout_pair_set(cfg)
    for p in by_split["test"]:  # the train distribution: no held-out pair
        assert not operator_pairs(p.spec.tree, p.spec.tail) & held, p.key
    train_fns = {(p.spec.tree.canonical(), p.spec.tail) for p in by_split["train"]}
    assert not train_fns & {(p.spec.tree.canonical(), p.spec.tail) for p in by_split["test"]}
    # test_fraction=0 draws the same trees as before the split existed: prepared sets stay reproducible
    old = generate(SynthConfig(n=60, seed=2))
    assert [p.source for p in old] == [p.source for p in generate(SynthConfig(n=60, seed=2, test_fraction=0.0))]
    manifest = write(problems, tmp_path, cfg, static_filter(problems)[1])
    assert manifest["counts"] == {"train": 210, "test": 60, "heldout": 30, "sft_rows": 210}
    assert len(load_local(tmp_path / "test", level=1)) == 60
    trained = {json.loads(line)["problem"] for line in (tmp_path / "sft_train.jsonl").read_text().splitlines()}
    assert trained == {p.key for p in by_split["train"]}


def test_size_controls_bound_the_operator_count_and_are_recorded(tmp_path):
    cfg = SynthConfig(n=80, seed=1, min_ops=3, max_ops=4, max_depth=4)
    problems = generate(cfg)
    assert {p.spec.tree.num_ops for p in problems} == {3, 4}
    manifest = write(problems, tmp_path, cfg, static_filter(problems)[1])
    for row, p in zip(manifest["problems"], problems):
        assert (row["num_ops"], row["depth"]) == (p.spec.tree.num_ops, p.spec.tree.depth)
        assert 1 <= row["depth"] <= row["num_ops"]
    with pytest.raises(ConfigError, match="min_ops"):
        SynthConfig(min_ops=4, max_ops=3)
    with pytest.raises(ConfigError, match="test_fraction"):
        SynthConfig(heldout_fraction=0.5, test_fraction=0.5)


def test_every_variant_passes_the_static_check_and_variants_differ():
    problems = generate(SynthConfig(n=200, seed=1))
    kept, dropped = static_filter(problems)
    assert not dropped and len(kept) == 200
    for p in kept:
        assert len(p.variants) >= 3, p.key  # block sizes / warps and the two-kernel variant
        for code in p.variants.values():
            assert static_check(code, "triton").ok
        assert "unfused" in p.variants and p.variants["unfused"].count("@triton.jit") == 2
    assert {p.spec.tail for p in kept} >= {"none", "softmax", "rowsum", "layernorm"}
    assert {p.spec.dtype for p in kept} == {"float32", "float16", "bfloat16"}
    assert {p.spec.num_inputs for p in kept} == {1, 2, 3}


def test_written_folders_load_as_kernelbench_and_sft_rows_are_chats(tmp_path):
    cfg = SynthConfig(n=12, seed=2)
    problems, _ = static_filter(generate(cfg))
    manifest = write(problems, tmp_path, cfg, {})
    train = load_local(tmp_path / "train", 1, with_solutions=True)
    heldout = load_local(tmp_path / "heldout", 1, with_solutions=True)
    assert len(train) + len(heldout) == 12 and heldout
    assert {p.key for p in train} == {m["key"] for m in manifest["problems"] if m["split"] == "train"}
    for p in train + heldout:
        assert p.small_sizes and set(p.small_sizes) == {"batch_size", "dim"}
        assert p.solution_source and "class ModelNew" in p.solution_source
    rows = [json.loads(line) for line in (tmp_path / "sft_train.jsonl").read_text().splitlines()]
    assert len(rows) == len(train)
    assert {r["problem"] for r in rows} == {p.key for p in train}  # no held-out problem leaks into SFT
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant"]
        assert row["messages"][2]["content"].startswith("```python\n")


def test_sft_rows_turn_into_masked_samples(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    from smart.config import DataConfig
    from smart.rollout.data import conversation_to_sample, load_sft_conversations

    cfg = SynthConfig(n=4, seed=5)
    write(static_filter(generate(cfg))[0], tmp_path, cfg, {})
    convs = load_sft_conversations(DataConfig(sft_jsonl=str(tmp_path / "sft_train.jsonl")), "triton", "zero_shot")
    tok = AutoTokenizer.from_pretrained(tiny_model)
    sample = conversation_to_sample(tok, convs[0])
    assert sum(sample.loss_mask) > 50 and len(sample.prompt_token_ids) > 50


def test_verify_keeps_correct_variants_and_drops_a_broken_one():
    problems, _ = static_filter(generate(SynthConfig(n=2, seed=7, heldout_fraction=0.5)))
    target = problems[0]
    broken = next(v for v in target.variants if v != next(iter(target.variants)))
    # A wrong answer that still compiles: every stored value is off by one.
    target.variants[broken] = target.variants[broken].replace(".to(out_ptr.dtype.element_ty)",
                                                              ".to(out_ptr.dtype.element_ty) + 1")
    n_before = sum(len(p.variants) for p in problems)
    kept, dropped = verify(problems, device="cpu", evaluators=2, trials=1)
    assert len(kept) == 2
    assert broken not in kept[0].variants and sum(len(p.variants) for p in kept) == n_before - 1
    assert sum(dropped.values()) == 1 and next(iter(dropped)).startswith("incorrect")


def _shape(expr: str) -> str:
    """An expression without its function names: what is left is operands, operators and parentheses."""
    return re.sub(r"[A-Za-z_][A-Za-z_.]*\(", "(", expr.replace(', approximate="tanh"', ""))


def test_inline_style_mirrors_the_pytorch_expression_and_passes_the_evaluator():
    """Inline solutions: the kernel's expression is the forward's with the function names swapped, every
    helper the grammar can call is used somewhere, and every variant passes the evaluator (interpreter)."""
    problems = generate(SynthConfig(n=16, seed=0, solution_style="inline", max_variants=1))
    names = ["x0", "x1", "x2"]
    for p in problems:
        triton_expr = to_triton_inline(p.spec.tree, names)
        assert _shape(triton_expr) == _shape(to_torch(p.spec.tree, names))
        assert triton_expr in next(iter(p.variants.values()))
        assert "torch." not in triton_expr
    sources = [src for p in problems for src in p.variants.values()]
    assert all(any(f"def _{op}(" in src for src in sources) for op in INLINE_HELPERS)
    kept, dropped = verify(problems, device="cpu", evaluators=2, trials=1)
    assert not dropped and len(kept) == len(problems)


def test_mixed_style_writes_each_variant_both_ways_and_sft_sees_both(tmp_path):
    """mixed: every variant as inline_V and ssa_V (the same kernel, the expression written two ways), so a
    model trained on it samples either; with two variants kept and sft_variants=mix, SFT's conversations
    use both styles, one per problem."""
    cfg = SynthConfig(n=24, seed=3, solution_style="mixed", max_variants=2)
    problems, _ = static_filter(generate(cfg))
    for p in problems:
        inline = solution_variants(p.spec, "inline")
        ssa = solution_variants(p.spec, "ssa")
        first = next(iter(inline))
        assert list(p.variants) == [f"inline_{first}", f"ssa_{first}"]
        assert p.variants[f"inline_{first}"] == inline[first] and p.variants[f"ssa_{first}"] == ssa[first]
    write(problems, tmp_path, cfg, {})
    rows = [json.loads(line) for line in (tmp_path / "sft_train.jsonl").read_text().splitlines()]
    styles = {r["variant"].split("_")[0] for r in rows}
    assert styles == {"inline", "ssa"} and len(rows) == len({r["problem"] for r in rows})
    kept, dropped = verify(problems[:3], device="cpu", evaluators=2, trials=1)
    assert not dropped and all(len(p.variants) == 2 for p in kept)


def test_per_op_launches_one_kernel_per_operator_and_is_kept_only_when_named():
    """per_op, the speed stage's slow variant: a line-by-line translation, one launch per operator (kernels of
    the same operator shared), each through an fp32 temp; it passes the evaluator like the fused canonical one,
    and a set holds it only when synth.variants names it."""
    assert not any("per_op" in p.variants for p in generate(SynthConfig(n=12, seed=5)))
    cfg = SynthConfig(n=12, seed=5, min_ops=3, max_ops=5, solution_style="inline",
                      variants=["fused_b1024", "fused_w4", "per_op"])
    problems = generate(cfg)
    assert {p.spec.tail != "none" for p in problems} == {True, False}
    for p in problems:
        assert list(p.variants) == ["fused_b1024" if p.spec.tail == "none" else "fused_w4", "per_op"]
        code = p.variants["per_op"]
        assert code.count("[grid](") == p.spec.tree.num_ops
        assert code.count("@triton.jit\ndef op") <= p.spec.tree.num_ops
        assert code.count("dtype=torch.float32") == p.spec.tree.num_ops - (p.spec.tail == "none")
    kept, dropped = verify(problems[:6], device="cpu", evaluators=2, trials=1)
    assert not dropped and all(len(p.variants) == 2 for p in kept)


def test_bad_config_is_one_clear_error():
    with pytest.raises(ConfigError, match="dtypes"):
        SynthConfig(dtypes=["float64"])
    with pytest.raises(ConfigError, match="heldout_fraction"):
        SynthConfig(heldout_fraction=0.0)
    with pytest.raises(ConfigError, match="max_variants"):
        SynthConfig(max_variants=-1)
    with pytest.raises(ConfigError, match="unknown solution variant.s. fast: choose from fused_b1024"):
        SynthConfig(variants=["fast"])
    with pytest.raises(ConfigError, match="solution_style must be one of ssa, inline, mixed"):
        SynthConfig(solution_style="nested")


def test_cli_help_and_refuses_to_overwrite(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "kbencheval.cli", "synth", *a],  # noqa: E731
                                    capture_output=True, text=True, env=ENV)
    assert run("--help").returncode == 0
    first = run("--out", str(tmp_path), "--n", "20")
    assert first.returncode == 0, first.stderr
    assert "problems/min" in first.stdout and "kept 16 train + 0 test + 4 held-out" in first.stdout
    again = run("--out", str(tmp_path), "--n", "20")
    assert again.returncode == 2 and "already holds a synth run" in again.stderr


@pytest.mark.gpu
def test_verify_on_the_gpu_keeps_every_variant_and_times_them():
    problems = generate(SynthConfig(n=10, seed=11))
    n_variants = sum(len(p.variants) for p in problems)
    kept, dropped = verify(problems, device="cuda", evaluators=1, trials=2, timing=True)
    assert not dropped, dropped
    assert sum(len(p.variants) for p in kept) == n_variants
    assert all(set(p.speedups) == set(p.variants) for p in kept)


@pytest.mark.gpu
def test_per_op_is_slower_than_the_fused_kernel_on_the_gpu():
    """The speed stage's premise: the per-operator translation is slower than the fused kernel, and no faster
    than 1.5x the eager reference (so fast_1.5 tells them apart). Not for an rmsnorm tail: eager PyTorch writes it
    as five kernels and per_op's tail is one, so per_op can beat eager there."""
    problems = generate(SynthConfig(n=10, seed=11, min_ops=2, max_ops=4, variants=["fused_b1024", "fused_w4", "per_op"]))
    kept, dropped = verify(problems, device="cuda", evaluators=1, trials=2, timing=True)
    assert not dropped, dropped
    for p in kept:
        fused = p.speedups["fused_b1024" if "fused_b1024" in p.speedups else "fused_w4"]
        assert p.speedups["per_op"] < fused, (p.key, p.speedups)
        assert p.spec.tail == "rmsnorm" or p.speedups["per_op"] < 1.5, (p.key, p.speedups)
