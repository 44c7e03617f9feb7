"""Generate synthetic problems, split them by operator pairs, verify them, and write them to disk.

    problems = generate(SynthConfig(n=1000, seed=0))        # fast: no code runs
    kept, dropped = verify(problems, device="cpu", evaluators=2)  # the real evaluator, every variant
    write(kept, "runs/synth", cfg, dropped)

Splits: train (SFT and RL draw from it); test (new problems from the train distribution, never
trained on: what RL can improve); heldout (every problem has an operator pair train never contains).
Layout written (each split is a KernelBench folder that `kbencheval.dataset.load_local` reads):
    OUT/train/level1/{id}_{Name}.py            OUT/train/solutions/level1/{id}_{Name}.py (canonical)
    OUT/test/level1/..., OUT/heldout/level1/...  and their solutions/level1/...
    OUT/{split}/variants/level1/{id}_{Name}/{variant}.py
    OUT/manifest.json                          (split, pairs, variants, drops per problem)
    OUT/sft_train.jsonl                        ({"messages": [...]} rows for `smart sft data.sft_jsonl=...`)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import random
import time
from pathlib import Path

from kbencheval.config import ConfigError
from kbencheval.dataset import parse_problem
from kbencheval.extract import static_check
from kbencheval.synth.grammar import TAILS, all_pairs, operator_pairs, sample_tree
from kbencheval.synth.render import DEFAULT_VARIANTS, STYLES, VARIANTS, Spec, problem_source, solution_variants

SPLITS = ("train", "test", "heldout")


@dataclasses.dataclass(kw_only=True)
class SynthConfig:
    n: int = 200
    """Problems to generate, train and held-out together (before verification drops any)."""
    heldout_fraction: float = 0.2
    test_fraction: float = 0.0
    """Share of problems in the in-distribution test split: sampled like train problems, never trained on."""
    seed: int = 0
    heldout_pairs: int = 16
    """(parent, child) operator pairs that only held-out problems contain: train never sees them."""
    max_inputs: int = 3
    max_depth: int = 3
    min_ops: int = 2
    max_ops: int = 0
    """Operators per expression tree (the tail not counted), 0: no upper bound. Success falls steeply with
    the count, so a learning run picks the sizes where its model has room to improve."""
    dtypes: list[str] = dataclasses.field(default_factory=lambda: ["float32"] * 3 + ["float16", "bfloat16"])
    """Drawn uniformly per problem (repeat an entry to weight it)."""
    tail_fraction: float = 0.6
    """Share of problems with a row reduction, softmax or norm after the expression."""
    prompt_style: str = "zero_shot"
    """Prompt style of the SFT conversations (use the same one for RL and evaluation)."""
    sft_variants: str = "mix"
    """canonical: one conversation per train problem with the canonical solution; all: one per variant;
    mix: one per problem, the canonical solution half the time and another variant otherwise."""
    variants: list[str] = dataclasses.field(default_factory=list)
    """Keep only these solution variants (render.VARIANTS names; in mixed style each in both styles), in the
    renderer's order, the first kept canonical; [] keeps all but per_op (render.DEFAULT_VARIANTS). The speed stage's
    set keeps a fused one and per_op, so SFT teaches a fast and a slow way to write each kernel."""
    max_variants: int = 0
    """Keep the first K solution variants per problem (canonical first), 0 for all: verification costs one
    evaluation per variant, so a large corpus for SFT verifies only the ones it keeps."""
    solution_style: str = "ssa"
    """How solutions write the expression (kbencheval.synth.render.STYLES): ssa, one statement per
    operator in post-order; inline, one nested expression shaped like the PyTorch one, with helpers; mixed,
    every variant in both (inline_V, ssa_V), so SFT on it teaches two ways to write each kernel."""

    def __post_init__(self):
        if self.n < 2:
            raise ConfigError(f"n must be >= 2 (at least one train and one held-out problem), got {self.n}")
        if not 0 < self.heldout_fraction < 1:
            raise ConfigError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if not 0 <= self.test_fraction < 1 - self.heldout_fraction:
            raise ConfigError(f"test_fraction must be in [0, 1 - heldout_fraction), got {self.test_fraction}")
        if self.min_ops < 2 or (self.max_ops and self.max_ops < self.min_ops):
            raise ConfigError(f"need 2 <= min_ops <= max_ops (max_ops 0: unbounded), got min_ops={self.min_ops} "
                              f"max_ops={self.max_ops}")
        if not 1 <= self.max_inputs <= 3:
            raise ConfigError(f"max_inputs must be 1, 2 or 3, got {self.max_inputs}")
        if self.max_depth < 2:
            raise ConfigError(f"max_depth must be >= 2, got {self.max_depth}")
        bad = [d for d in self.dtypes if d not in ("float32", "float16", "bfloat16")]
        if bad or not self.dtypes:
            raise ConfigError(f"dtypes {bad or '[]'}: choose from float32, float16, bfloat16")
        if self.sft_variants not in ("canonical", "all", "mix"):
            raise ConfigError(f"sft_variants must be canonical, all or mix, got {self.sft_variants!r}")
        if self.solution_style not in STYLES:
            raise ConfigError(f"solution_style must be one of {', '.join(STYLES)}, got '{self.solution_style}'")
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown:
            raise ConfigError(f"unknown solution variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
        if self.max_variants < 0:
            raise ConfigError(f"max_variants must be >= 0 (0 keeps all), got {self.max_variants}")
        if not 0 < self.heldout_pairs < len(all_pairs()) // 2:
            raise ConfigError(f"heldout_pairs must be in [1, {len(all_pairs()) // 2}), got {self.heldout_pairs}")


@dataclasses.dataclass
class SynthProblem:
    problem_id: int
    name: str
    split: str
    spec: Spec
    source: str
    variants: dict[str, str]
    """Variant name -> solution source; after verify() only the variants that passed, canonical first."""
    pairs: list[tuple[str, str]]
    speedups: dict[str, float] = dataclasses.field(default_factory=dict)
    """verify(timing=True) on a GPU: variant -> speedup over the eager reference."""

    @property
    def filename(self) -> str:
        return f"{self.problem_id}_{self.name}.py"

    @property
    def key(self) -> str:
        return f"L1_{self.problem_id}_{self.name}"


def heldout_pair_set(cfg: SynthConfig) -> set[tuple[str, str]]:
    return set(random.Random(f"pairs:{cfg.seed}").sample(all_pairs(), cfg.heldout_pairs))


def _sample_spec(rng: random.Random, cfg: SynthConfig) -> Spec:
    num_inputs = rng.randint(1, cfg.max_inputs)
    tree = sample_tree(rng, num_inputs, cfg.max_depth)
    tail = rng.choice(TAILS[1:]) if rng.random() < cfg.tail_fraction else "none"
    if tail == "none":  # elementwise: 1M-16M elements at full size
        batch, dim = rng.choice((1024, 2048, 4096, 8192)), rng.choice((1024, 2048, 4096))
    else:  # a row must fit one block
        batch, dim = rng.choice((2048, 4096, 8192, 16384)), rng.choice((256, 512, 1024, 2048, 4096))
    return Spec(tree=tree, tail=tail, num_inputs=num_inputs, dtype=rng.choice(cfg.dtypes), batch=batch, dim=dim,
                small_batch=rng.choice((2, 3, 5)), small_dim=rng.choice((33, 48, 100, 130)))


def _name(spec: Spec) -> str:
    ops = []
    for node in spec.tree.preorder():
        if node.op != "input" and node.op not in ops:
            ops.append(node.op)
    parts = [o.capitalize() for o in ops[:4]] + ([spec.tail.capitalize()] if spec.tail != "none" else [])
    return "_".join(parts)


def generate(cfg: SynthConfig) -> list[SynthProblem]:
    """Sample until every split is full; deterministic in cfg. Structures (tree + tail) never repeat."""
    rng = random.Random(cfg.seed)
    split_rng = random.Random(f"split:{cfg.seed}")  # train/test choice apart, so trees match test_fraction=0's
    held = heldout_pair_set(cfg)
    want = {"heldout": max(1, round(cfg.n * cfg.heldout_fraction)), "test": round(cfg.n * cfg.test_fraction)}
    want["train"] = cfg.n - want["heldout"] - want["test"]
    p_test = want["test"] / max(1, want["train"] + want["test"])
    got = {s: [] for s in SPLITS}
    seen: set[str] = set()
    # ids unique across splits, so keys are too: train first, then test, then held-out
    next_id = {"train": 1, "test": want["train"] + 1, "heldout": want["train"] + want["test"] + 1}
    attempts = 0
    while any(len(got[s]) < want[s] for s in SPLITS):
        attempts += 1
        if attempts > 200 * cfg.n + 10_000:
            raise ConfigError(f"could not fill the splits after {attempts} trees (have "
                              f"{len(got['train'])} train, {len(got['test'])} test, {len(got['heldout'])} held-out); "
                              "raise max_depth, max_inputs or max_ops, or change heldout_pairs")
        spec = _sample_spec(rng, cfg)
        ops = spec.tree.num_ops
        if ops < cfg.min_ops or (cfg.max_ops and ops > cfg.max_ops):
            continue
        key = f"{spec.tree.canonical()}>{spec.tail}"
        if key in seen:
            continue
        pairs = operator_pairs(spec.tree, spec.tail)
        if pairs & held:
            split = "heldout"
        else:
            room = [s for s in ("train", "test") if len(got[s]) < want[s]]
            split = ("test" if split_rng.random() < p_test else "train") if len(room) == 2 else (room or ["train"])[0]
        if len(got[split]) >= want[split]:
            continue
        seen.add(key)
        variants = solution_variants(spec, cfg.solution_style)
        kept = cfg.variants or DEFAULT_VARIANTS  # mixed style names them inline_V and ssa_V
        variants = {name: code for name, code in variants.items()
                    if name.removeprefix("inline_").removeprefix("ssa_") in kept}
        if not variants:
            continue
        if cfg.max_variants:
            variants = dict(list(variants.items())[:cfg.max_variants])
        got[split].append(SynthProblem(next_id[split], _name(spec), split, spec, problem_source(spec),
                                       variants, sorted(pairs)))
        next_id[split] += 1
    return [p for s in SPLITS for p in got[s]]


def static_filter(problems: list[SynthProblem]) -> tuple[list[SynthProblem], collections.Counter]:
    """Parse every problem as KernelBench does and run the evaluator's static check on every solution."""
    dropped: collections.Counter = collections.Counter()
    kept = []
    for p in problems:
        parse_problem(p.source, level=1, problem_id=p.problem_id, name=p.name)  # raises: a generator bug
        for variant, code in list(p.variants.items()):
            report = static_check(code, "triton")
            if not report.ok:
                dropped[f"static check: {report.reason}"] += 1
                del p.variants[variant]
        if p.variants:
            kept.append(p)
        else:
            dropped["problem: no variant passed the static check"] += 1
    return kept, dropped


def verify(problems: list[SynthProblem], *, device: str = "cpu", evaluators: int = 1, trials: int = 2,
           timeout_s: float = 120.0, timing: bool = False) -> tuple[list[SynthProblem], collections.Counter]:
    """Evaluate every variant with the real evaluator (its own sandbox, judge and checks); keep the
    variants judged correct and the problems with at least one. Returns (kept, drop reasons).
    timing=True (GPU only) also times each variant, so the manifest shows what the speed reward prefers."""
    from kbencheval.eval import EvalConfig
    from kbencheval.eval.pool import EvaluatorPool
    from kbencheval.progress import progress_bar

    kept, dropped = static_filter(problems)
    jobs = [(p, v) for p in kept for v in p.variants]
    verdicts: dict[tuple[int, str], object] = {}
    cfg = EvalConfig(device=device, trials=trials, timeout_s=timeout_s, timing=timing)
    if jobs:
        candidates = [(parse_problem(p.source, level=1, problem_id=p.problem_id, name=p.name),
                       f"```python\n{p.variants[v]}```") for p, v in jobs]
        # every variant is its own candidate, so nothing is deduplicated
        with progress_bar(len(jobs), "verify variants") as advance, \
                EvaluatorPool(cfg, [device] * max(1, min(evaluators, len(jobs))), dedupe=False) as pool:
            for (p, v), result in zip(jobs, pool.evaluate(candidates, on_result=lambda i, r: advance())):
                verdicts[(p.problem_id, v)] = result
    out = []
    for p in kept:
        for v in list(p.variants):
            result = verdicts[(p.problem_id, v)]
            if result.status.value != "correct":
                first_line = (result.error or "").strip().splitlines()[:1]
                dropped[f"{result.status.value}: {first_line[0][:100] if first_line else 'no error text'}"] += 1
                del p.variants[v]
            elif result.speedup is not None:
                p.speedups[v] = round(result.speedup, 3)
        if p.variants:
            out.append(p)
        else:
            dropped["problem: no variant passed the evaluator"] += 1
    return out, dropped


def sft_rows(problems: list[SynthProblem], cfg: SynthConfig) -> list[dict]:
    """Train-split conversations in the RL prompt format (kbencheval.prompts.build_prompt)."""
    from kbencheval.prompts import build_prompt

    rng = random.Random(f"sft:{cfg.seed}")
    rows = []
    for p in problems:
        if p.split != "train":
            continue
        names = list(p.variants)
        if cfg.sft_variants == "all":
            chosen = names
        elif cfg.sft_variants == "mix" and len(names) > 1 and rng.random() < 0.5:
            chosen = [rng.choice(names[1:])]
        else:
            chosen = names[:1]
        prompt = build_prompt(p.source, backend="triton", style=cfg.prompt_style)
        for v in chosen:
            answer = f"```python\n{p.variants[v].strip()}\n```"
            rows.append({"messages": prompt + [{"role": "assistant", "content": answer}],
                         "problem": p.key, "variant": v})
    return rows


def write(problems: list[SynthProblem], out: str | Path, cfg: SynthConfig, dropped: collections.Counter,
          stats: dict | None = None) -> dict:
    """Write both KernelBench folders, the variants, the SFT JSONL and the manifest; returns the manifest."""
    out = Path(out)
    for p in problems:
        root = out / p.split
        for sub in ("level1", "solutions/level1", f"variants/level1/{Path(p.filename).stem}"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "level1" / p.filename).write_text(p.source)
        (root / "solutions" / "level1" / p.filename).write_text(next(iter(p.variants.values())))
        for v, code in p.variants.items():
            (root / "variants" / "level1" / Path(p.filename).stem / f"{v}.py").write_text(code)
    rows = sft_rows(problems, cfg)
    (out / "sft_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {
        "config": dataclasses.asdict(cfg),
        "heldout_pairs": sorted(map(list, heldout_pair_set(cfg))),
        "counts": {s: sum(p.split == s for p in problems) for s in SPLITS} | {"sft_rows": len(rows)},
        "dropped": dict(dropped),
        "stats": stats or {},
        "problems": [{"key": p.key, "file": p.filename, "split": p.split, "signature": p.spec.tree.signature(),
                      "num_ops": p.spec.tree.num_ops, "depth": p.spec.tree.depth,
                      "tail": p.spec.tail, "dtype": p.spec.dtype, "pairs": [list(x) for x in p.pairs],
                      "variants": list(p.variants), "speedups": p.speedups} for p in problems],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def timed_generate(cfg: SynthConfig) -> tuple[list[SynthProblem], dict]:
    t0 = time.perf_counter()
    problems = generate(cfg)
    seconds = time.perf_counter() - t0
    return problems, {"generate_seconds": round(seconds, 3),
                      "problems_per_minute": round(60 * len(problems) / max(seconds, 1e-9))}
