"""python scripts/learning_compare.py RUN_DIR [--out RUN_DIR/plots/compare.json]

Paired comparisons of a learning run's checkpoints on the same problems and sampling seeds
(RUN/evals/{split}_{phase}[_greedy].json from `kbench report --json`): for each split, each measure
(pass@1 at T=1, pass@k at the largest k the samples allow, greedy pass@1) and each pair (RL vs SFT,
continued SFT vs SFT, RL vs continued SFT, shuffled-reward RL vs SFT, each ablation rl_NAME vs SFT and vs RL,
GRPO's policy after N steps, rl_stepN (rl.export_hf_every), vs SFT),
the mean change over problems with a paired 95% bootstrap interval; pass@1 per expression size (operators,
from RUN/synth/manifest.json); and, per checkpoint, how its sampled kernels write the expression (ssa: one
temporary per operator, t1 = ...; inline: one nested expression) with each style's share, pass@1 and failed samples
by verdict (compile_error, incorrect, ...), from the evaluation folders' generations and results
(synth.solution_style mixed trains on both). When the evaluations
were timed (eval.timing on a GPU: the speed stage), fast_1 and fast_1.5 too, per problem the share of samples
correct and faster than 1x / 1.5x the reference, paired like pass@1, and how many kernels each sample launches
(fused: one, per_op: one per operator).
Prints a table, writes JSON.

example: python scripts/learning_compare.py runs/learn_gpu_s0
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kbencheval.bench.metrics import paired_bootstrap, pass_at_k  # noqa: E402
from kbencheval.bench.store import read_results  # noqa: E402

PAIRS = (("rl", "sft"), ("sft_continued", "sft"), ("rl", "sft_continued"), ("rl_shuffled", "sft"))
OVER_TRAINING = re.compile(r"^rl_step(\d+)$")  # GRPO's policy after N steps (rl.export_hf_every), not an ablation


def per_problem(report: dict, k: int | str) -> dict[str, float]:
    """problem key -> unbiased pass@k from its n samples and c correct; k "fast_P": the share of its samples
    correct and faster than P times the reference (problems whose correct samples were not all timed left out)."""
    if isinstance(k, str):
        threshold = k.removeprefix("fast_")
        return {p["problem_key"]: p["fast_p"][threshold] for p in report["problems"]
                if (p.get("fast_p") or {}).get(threshold) is not None}
    return {p["problem_key"]: pass_at_k(p["n"], p["correct"], k) for p in report["problems"] if p["n"] >= k}


def timed(report: dict) -> bool:
    """Whether an evaluation was timed: some correct sample has a speedup (kbench report --json, eval.timing on on a
    GPU). A problem with no correct sample has fast_p shares of 0 either way, so those shares cannot tell."""
    return any(p.get("best_speedup") is not None for p in report["problems"])


_SSA_LINE = re.compile(r"^\s*t1 = ", re.MULTILINE)


def style_of(text: str) -> str:
    """How a sampled kernel writes the expression: ssa (t1 = ..., one temporary per operator), inline (one
    nested expression), or none (no code block)."""
    if "```" not in text:
        return "none"
    return "ssa" if _SSA_LINE.search(text) else "inline"


_KERNEL = re.compile(r"^@triton\.jit\s*\ndef (?!_)\w+", re.MULTILINE)  # helpers (_silu, ...) are not launched


def structure_of(text: str) -> str:
    """How many kernels a sampled solution defines: fused (one), two, per_op (three or more: one per operator,
    the speed stage's slow variant), or none (no code block or no kernel)."""
    count = len(_KERNEL.findall(text)) if "```" in text else 0
    return {0: "none", 1: "fused", 2: "two"}.get(count, "per_op")


def sample_shares(folder: Path, classify=style_of) -> dict[str, dict]:
    """class (style_of: how the expression is written; structure_of: how many kernels) -> share of the evaluation's
    samples, their pass@1 and how the others failed (verdict status -> count), from FOLDER/generations and
    results.jsonl (kbench generate / eval); empty when the folder is not there."""
    results = folder / "results.jsonl"
    if not results.is_file():
        return {}
    records, _ = read_results(results)  # the report's reader: an unreadable line is skipped, not fatal
    cells: dict[str, list] = {}
    for sample in sorted((folder / "generations").glob("*/sample_*.json")):
        g = json.loads(sample.read_text())
        record = records.get((g["problem_key"], g["sample"]), {})
        cell = cells.setdefault(classify(g.get("text") or ""), [0, 0, {}])
        cell[1] += 1
        if record.get("correct"):
            cell[0] += 1
        else:  # a sample with no verdict (its line torn or missing) counts as failed, as in pass@1
            status = record.get("status") or "no verdict"
            cell[2][status] = cell[2].get(status, 0) + 1
    total = sum(n for _, n, _ in cells.values())
    return {style: {"share": round(n / total, 4), "pass@1": round(c / n, 4), "failures": dict(sorted(failed.items()))}
            for style, (c, n, failed) in sorted(cells.items())}


def compare(evals: Path, sizes: dict[str, int]) -> dict:
    out: dict = {}
    for split in ("test", "heldout"):
        reports = {f.stem[len(split) + 1:]: json.loads(f.read_text()) for f in sorted(evals.glob(f"{split}_*.json"))
                   if "_probe_" not in f.stem}
        if not reports:
            continue
        # greedy reports hold one sample a problem; pass@k is over the sampled ones
        k_max = min((p["n"] for name, r in reports.items() if not name.endswith("_greedy") for p in r["problems"]),
                    default=1)
        measures = {"pass@1": ("", 1), f"pass@{k_max}": ("", k_max), "greedy pass@1": ("_greedy", 1)}  # k_max 1: one key
        speed = any(timed(r) for name, r in reports.items() if not name.endswith("_greedy"))
        if speed:
            measures |= {"fast_1": ("", "fast_1"), "fast_1.5": ("", "fast_1.5")}
        # ablations (rl_NAME) are compared with SFT and with the main GRPO run
        ablations = sorted(phase for phase in reports if phase.startswith("rl_") and not phase.endswith("_greedy")
                           and phase != "rl_shuffled" and not OVER_TRAINING.match(phase))
        during = sorted((phase for phase in reports if OVER_TRAINING.match(phase)),
                        key=lambda phase: int(OVER_TRAINING.match(phase).group(1)))
        pairs = PAIRS + tuple(pair for arm in ablations for pair in ((arm, "sft"), (arm, "rl")))
        pairs += tuple((phase, "sft") for phase in during)
        rows = {}
        for measure, (suffix, k) in measures.items():
            scores = {phase: per_problem(reports[phase + suffix], k) for phase in {"sft", *(a for a, _ in pairs)}
                      if phase + suffix in reports}
            for phase in sorted(scores, key=lambda name: (name != "sft", name)):
                values = scores[phase]
                rows.setdefault(measure, {})[phase] = sum(values.values()) / max(1, len(values))
            for after, before in pairs:
                if after in scores and before in scores:
                    keys = sorted(set(scores[after]) & set(scores[before]))
                    rows[f"{measure}: {after} - {before}"] = paired_bootstrap(
                        [scores[before][key] for key in keys], [scores[after][key] for key in keys])
        by_size: dict = {}
        for phase, report in reports.items():
            if phase.endswith("_greedy"):
                continue
            for p in report["problems"]:
                size = sizes.get(p["problem_key"])
                cell = by_size.setdefault(str(size), {}).setdefault(phase, [0, 0])
                cell[0] += p["correct"]
                cell[1] += p["n"]
        by_number = sorted(by_size.items(), key=lambda item: (not item[0].isdigit(), int(item[0]) if item[0].isdigit() else 0))
        rows["pass@1 by operators"] = {size: {phase: round(c / n, 4) for phase, (c, n) in sorted(
            cells.items(), key=lambda cell: (cell[0] != "sft", cell[0]))} for size, cells in by_number}
        phases = sorted(reports, key=lambda name: (name != "sft", name))
        rows["by style"] = {phase: cells for phase in phases if (cells := sample_shares(evals / f"{split}_{phase}"))}
        if speed:
            rows["by kernels"] = {phase: cells for phase in phases
                                  if (cells := sample_shares(evals / f"{split}_{phase}", structure_of))}
        out[split] = rows
    return out


def print_table(result: dict) -> None:
    for split, rows in result.items():
        print(f"== {split}")
        for name, value in rows.items():
            if isinstance(value, dict) and "diff" in value:
                print(f"  {name:42s} {100 * value['diff']:+6.1f} points  95% [{100 * value['lo']:+.1f}, "
                      f"{100 * value['hi']:+.1f}]  ({value['n']} problems)")
            elif name in ("by style", "by kernels"):
                for phase, cells in value.items():
                    print(f"  {name.removeprefix('by ')}, {phase}: " + ", ".join(
                        f"{style} {100 * c['share']:.0f}% of samples (pass@1 {100 * c['pass@1']:.1f}%; failed: "
                        + (", ".join(f"{status} {n}" for status, n in c["failures"].items()) or "none") + ")"
                        for style, c in cells.items()))
            elif name == "pass@1 by operators":
                for size, phases in value.items():
                    print(f"  pass@1, {size} operators: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in phases.items()))
            else:
                print(f"  {name:42s} " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in value.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="paired comparisons of a learning run's checkpoints",
                                 epilog="example: python scripts/learning_compare.py runs/learn_gpu_s0")
    ap.add_argument("run", type=Path, help="a learning run's folder (RUN/evals, RUN/synth/manifest.json)")
    ap.add_argument("--out", type=Path, help="JSON output (default RUN/plots/compare.json)")
    args = ap.parse_args(argv)
    evals = args.run / "evals"
    if not evals.is_dir():
        print(f"learning_compare: {evals} does not exist; pass a run folder written by scripts/run_learning.sh",
              file=sys.stderr)
        return 2
    manifest = args.run / "synth" / "manifest.json"
    sizes = {}
    if manifest.is_file():
        sizes = {p["key"]: p.get("num_ops") for p in json.loads(manifest.read_text())["problems"]}
    result = compare(evals, sizes)
    print_table(result)
    out = args.out or args.run / "plots" / "compare.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
