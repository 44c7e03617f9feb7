"""python scripts/learning_report.py RUN [RUN ...] --doc docs/results/learning.md [--files docs/results/learning]

Writes the current learning runs into the report page from their own outputs, so the numbers on the page
are the runs' numbers: for each RUN (a folder written by scripts/run_learning.sh, with plots/compare.json,
plots/summary.json and the PNGs of plots/) a section with its command, the success criteria checked
against the paired comparisons, pass@1/pass@k/greedy per checkpoint, the changes with their paired 95%
intervals, pass@1 per expression size, the multi-turn evaluation per turn, stage seconds and the curves.
The sections replace what stands between the page's `<!-- learning_report:begin -->` and
`<!-- learning_report:end -->` lines (added at the top when missing); each RUN's plots, compare.json and
summary.json are copied to FILES/<run name>/.

example: python scripts/learning_report.py runs/learn_gpu_s0 runs/learn_gpu_s1 --doc docs/results/learning.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

BEGIN, END = "<!-- learning_report:begin -->", "<!-- learning_report:end -->"


def at_least(bar: float, interval_above_zero: bool = False):
    return lambda c: c["diff"] >= bar and (c["lo"] > 0 or not interval_above_zero)


# the issue's bars, fixed before the runs: GRPO - SFT >= 15 points (interval above 0), GRPO - continued SFT >= 10
CRITERIA = (("pass@1: rl - sft", at_least(0.15, True),
             "test pass@1 after GRPO - after SFT >= +15 points, interval above 0"),
            ("pass@1: rl - sft_continued", at_least(0.10), "test pass@1 after GRPO - continued SFT >= +10 points"),
            ("greedy pass@1: rl - sft", lambda c: c["diff"] > 0, "greedy test pass@1 rises"),
            ("pass@1: rl_shuffled - sft", lambda c: c["lo"] <= 0,
             "shuffled-reward GRPO does not beat SFT (interval not above 0)"))
# the speed stage's (configs/learn_speed_gpu.yaml): a run whose evaluations were timed is judged by these
SPEED_CRITERIA = (("fast_1.5: rl - sft", at_least(0.10, True),
                   "test fast_1.5 after GRPO - after SFT >= +10 points, interval above 0"),
                  ("pass@1: rl - sft", at_least(-0.02), "test pass@1 falls by at most 2 points"))


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def change(c: dict) -> str:
    return f"{100 * c['diff']:+.1f} [{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}]"


def criteria_rows(test: dict) -> list[str]:
    rows = []
    for key, met, text in SPEED_CRITERIA if "fast_1.5: rl - sft" in test else CRITERIA:
        c = test.get(key)
        rows.append(f"| {text} | not run | - |" if c is None else
                    f"| {text} | {change(c)} | {'met' if met(c) else 'not met'} |")
    return rows


def section(run: Path, files: Path, doc: Path) -> str:
    compare = json.loads((run / "plots" / "compare.json").read_text())
    summary = json.loads((run / "plots" / "summary.json").read_text())
    learning = json.loads((run / "config" / "learning.json").read_text())
    name = run.name
    recorded = run / "config" / "command.txt"  # runs before 2026-12-07 did not record theirs
    command = (recorded.read_text().strip() if recorded.is_file() else
               f"bash scripts/run_learning.sh CONFIG {run}   # the settings below are RUN/config/learning.json")
    lines = [f"### {name}", "", "```", command, "```", "",
             f"seed {learning.get('seed', 0)}, synth {json.dumps(learning.get('synth', {}))}", ""]
    test = compare.get("test", {})
    if test:
        lines += ["| success criterion | change, paired 95% interval (points) | |", "| --- | --- | --- |",
                  *criteria_rows(test), ""]
    for split, rows in compare.items():
        measures = [k for k, v in rows.items()
                    if isinstance(v, dict) and "diff" not in v
                    and k not in ("pass@1 by operators", "by style", "by kernels")]
        phases = sorted({p for m in measures for p in rows[m]}, key=lambda p: (p != "sft", p != "rl", p))
        lines += [f"**{split}**", "", "| measure | " + " | ".join(phases) + " |", "| --- " * (len(phases) + 1) + "|"]
        lines += [f"| {m} | " + " | ".join(pct(rows[m].get(p)) for p in phases) + " |" for m in measures]
        lines += ["", "| change | points, paired 95% interval | problems |", "| --- | --- | --- |"]
        lines += [f"| {k} | {change(v)} | {v['n']} |" for k, v in rows.items() if isinstance(v, dict) and "diff" in v]
        sizes = rows.get("pass@1 by operators", {})
        if sizes:
            lines += ["", "| operators | " + " | ".join(phases) + " |", "| --- " * (len(phases) + 1) + "|"]
            lines += [f"| {size} | " + " | ".join(pct(cells.get(p)) for p in phases) + " |" for size, cells in sizes.items()]
        # how the sampled kernels write the expression (learning_compare.style_of) and how many kernels they launch
        for kind, header in (("by style", "style"), ("by kernels", "kernels")):
            if rows.get(kind):
                lines += ["", f"| checkpoint | {header} | share of samples | pass@1 | failed samples |",
                          "| --- | --- | --- | --- | --- |"]
                lines += [f"| {phase} | {cls} | {pct(c['share'])} | {pct(c['pass@1'])} | "
                          + (", ".join(f"{status} {n}" for status, n in c.get("failures", {}).items()) or "none") + " |"
                          for phase, cells in rows[kind].items() for cls, c in cells.items()]
        lines.append("")
    turns = {p.stem.removeprefix("multiturn_"): json.loads(p.read_text()) for p in sorted((run / "evals").glob("multiturn_*.json"))}
    if turns:
        lines += ["**multi-turn** (the evaluator's feedback after each unsolved reply): solved by turn t; of those "
                  "that reached turn t, fixed there", "", "| turn | " + " | ".join(turns) + " |",
                  "| --- " * (len(turns) + 1) + "|"]
        for t in next(iter(turns.values()))["by_turn"]:
            cells = [turns[p]["by_turn"].get(t, {}) for p in turns]
            lines.append(f"| {t} | " + " | ".join(f"{pct(c.get('solved_by_turn'))}; {pct(c.get('fixed_here'))} of "
                                                  f"{c.get('reached', 0)}" for c in cells) + " |")
        lines.append("")
    seconds = summary.get("stage_seconds", {})
    if seconds:
        lines += ["stage seconds: " + ", ".join(f"{k} {v}" for k, v in seconds.items()), ""]
    target = files / name
    target.mkdir(parents=True, exist_ok=True)
    for png in summary.get("plots", []):
        shutil.copy2(run / "plots" / png, target / png)
        lines.append(f"![{png}]({target.relative_to(doc.parent) / png})")
    for extra in ("compare.json", "summary.json"):
        shutil.copy2(run / "plots" / extra, target / extra)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write learning runs into the report page from their outputs",
                                 epilog="example: python scripts/learning_report.py runs/learn_gpu_s0 --doc docs/results/learning.md")
    ap.add_argument("runs", nargs="+", type=Path, help="run folders written by scripts/run_learning.sh")
    ap.add_argument("--doc", type=Path, required=True, help="the markdown page to update")
    ap.add_argument("--files", type=Path, help="where each run's plots and JSON go (default: DOC's folder/learning)")
    args = ap.parse_args(argv)
    for run in args.runs:
        for needed in ("plots/compare.json", "plots/summary.json", "config/learning.json"):
            if not (run / needed).is_file():
                print(f"learning_report: {run / needed} is missing; run scripts/run_learning.sh {run} to the end first",
                      file=sys.stderr)
                return 2
    files = args.files or args.doc.parent / "learning"
    body = "\n".join(section(run, files, args.doc) for run in args.runs)
    text = args.doc.read_text() if args.doc.is_file() else "# Does the loop learn?\n"
    block = f"{BEGIN}\n## Current runs (written by scripts/learning_report.py)\n\n{body}{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        head, _, rest = text.partition("\n")
        text = f"{head}\n\n{block}\n{rest}"
    args.doc.write_text(text)
    print(f"wrote {len(args.runs)} run(s) into {args.doc}; files in {files}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
