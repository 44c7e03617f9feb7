"""Summarise an evaluated run: rate tables, fast_p, pass@k, geomean speedup, and an HTML page of plots.

    kbench report qwen_l1                       # tables on the terminal + runs/qwen_l1/report.html
    kbench report qwen_l1 --json                # machine output on stdout
    kbench report qwen_l1 --html /tmp/r.html    # or: kbench report run_name=qwen_l1 html=/tmp/r.html

Metric definitions are in kbencheval/bench/metrics.py. Speedups measured under the CPU interpreter
mean nothing, so they are shown as "untimed", never as numbers.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import statistics
from collections import defaultdict
from pathlib import Path

from rich.table import Table

from kbencheval.bench.common import cli_main, console, require, stdout
from kbencheval.bench.metrics import FAST_P_THRESHOLDS, PASS_AT_K, STATUSES, fast_p, summarize, timed_speedup
from kbencheval.bench.store import MANIFEST, RESULTS, RunError, list_generations, read_json, read_results, run_dir
from kbencheval.bench.tables import sample_rows, tables_note, write_tables
from kbencheval.config import ConfigError, config_help, load_config, wants_help

UNTIMED = "untimed"


@dataclasses.dataclass(kw_only=True)
class ReportConfig:
    run_name: str = ""
    run_b: str = ""
    """A second run: compare the two side by side, with paired differences per problem (`kbench report A B`)."""
    runs_dir: str = "runs"
    json: bool = False
    """Print the summary as JSON on stdout instead of tables."""
    html: str = ""
    """Where to write the HTML page; empty = runs/<name>/report.html (runs/<A>_vs_<B>.html for two runs).
    CSV and parquet tables are written beside it."""


USAGE = ("kbench report RUN [RUN_B] [--json] [--html PATH] [key=value ...]   (also scripts/benchmark_eval_analysis.py)")
EXAMPLE = "kbench report qwen_l1 --json"


def parse_args(argv: list[str]) -> ReportConfig | None:
    """Accept both `RUN --json --html PATH` and key=value overrides; None after printing --help."""
    if wants_help(argv):
        print(config_help(ReportConfig, USAGE, EXAMPLE))
        return None
    overrides, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--json":
            overrides.append("json=True")
        elif arg == "--html":
            if i + 1 >= len(argv):
                raise ConfigError("--html needs a path: --html report.html")
            overrides.append(f"html={argv[i + 1]}")
            i += 1
        elif arg.startswith("--html="):
            overrides.append(f"html={arg.split('=', 1)[1]}")
        elif "=" not in arg and not arg.startswith("-"):
            named = sum(o.startswith(("run_name=", "run_b=")) for o in overrides)
            if named >= 2:
                raise ConfigError(f"too many runs ({arg!r}): `kbench report RUN` or `kbench report RUN_A RUN_B`")
            overrides.append(f"{'run_b' if named else 'run_name'}={arg}")
        else:
            overrides.append(arg)
        i += 1
    cfg = load_config(ReportConfig, None, overrides)
    require(cfg.run_name, "name the run: `kbench report NAME` (or run_name=NAME)")
    return cfg


def build_report(run: Path) -> dict:
    manifest = read_json(run / MANIFEST)
    records, unreadable = read_results(run / RESULTS)
    if not records:
        raise RunError(f"{run / RESULTS} has no results yet; run `kbench eval run_name={run.name}` first")
    n_generations = len(list_generations(run))
    rows = list(records.values())
    report = {
        "run_name": manifest.get("run_name", run.name),
        "model": manifest.get("model", ""),
        "prompt_style": manifest.get("prompt_style", ""),
        "backend": manifest.get("backend", ""),
        "devices": sorted({r.get("device", "") for r in rows}),
        "n_generations": n_generations,
        "n_results": len(rows),
        "unreadable_lines": unreadable,
        "summary": summarize(rows),
        "problems": per_problem(rows),
        "timing_modes": timing_modes(rows),
    }
    from kbencheval.bench.kernelbench import RECORDED, compare_recorded  # runs imported from KernelBench only

    if (run / RECORDED).is_file():
        report["kernelbench"] = compare_recorded(run)
    return report


def timing_modes(records: list[dict]) -> dict[str, dict]:
    """Timed verdicts per timing mode, and whether a reward may use that mode's numbers (checks["timing_mode"])."""
    modes: dict[str, dict] = {}
    for r in records:
        grade = (r.get("checks") or {}).get("timing_mode")
        if isinstance(grade, dict) and grade.get("mode"):
            entry = modes.setdefault(grade["mode"], {"n": 0, "reward_grade": bool(grade.get("reward_grade"))})
            entry["n"] += 1
    return modes


def comparison_only_note(report: dict) -> str:
    """One line for speedups measured in a comparison-only timing mode, or ''."""
    modes = [f"{mode} ({m['n']} samples)" for mode, m in report.get("timing_modes", {}).items()
             if not m["reward_grade"]]
    if not modes:
        return ""
    return (f"timed with timing_mode={', '.join(modes)}: comparison-only, not reward-grade (the candidate's worker "
            "timed itself); rewards and trusted numbers use timing_mode=trusted")


def per_problem(records: list[dict]) -> list[dict]:
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_key[r["problem_key"]].append(r)
    out = []
    for key, rs in sorted(by_key.items(), key=lambda kv: (kv[1][0].get("level", 0), kv[1][0].get("problem_id", 0))):
        speedups = sorted(s for s in map(timed_speedup, rs) if s is not None)
        correct = sum(1 for r in rs if r.get("correct"))
        out.append({
            "problem_key": key,
            "level": rs[0].get("level", 0),
            "n": len(rs),
            "correct": correct,
            "pass_at_1": correct / len(rs),
            "n_correct_untimed": correct - len(speedups),
            "best_speedup": speedups[-1] if speedups else None,
            "median_speedup": statistics.median(speedups) if speedups else None,
            # share of the problem's samples correct and faster than p times the reference (None: untimed)
            "fast_p": {f"{p:g}": fast_p(rs, p) for p in FAST_P_THRESHOLDS if p > 0},
        })
    return out


# ---------------------------------------------------------------- terminal tables

def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_ci(ci: list[float] | None, pct: bool = True) -> str:
    if not ci:
        return ""
    return f" [{100 * ci[0]:.0f}-{100 * ci[1]:.0f}]" if pct else f" [{ci[0]:.2f}-{ci[1]:.2f}]"


def fmt_rate_ci(group: dict, name: str) -> str:
    """A rate with its 95% interval, e.g. '41.2% [35-47]'."""
    value = group[name]
    return "-" if value is None else fmt_rate(value) + fmt_ci((group.get("intervals") or {}).get(name))


def fmt_fast(group: dict, p: str) -> str:
    value = group["fast_p"][p]
    if value is None:
        return "-" if group["n_samples"] == 0 else UNTIMED
    return fmt_rate(value) + fmt_ci((group.get("intervals") or {}).get("fast_p", {}).get(p))


def fmt_speedup(x: float | None, group: dict | None = None) -> str:
    if x is None:
        return UNTIMED if group and group["n_correct_untimed"] else "-"
    ci = ((group or {}).get("intervals") or {}).get("geomean_speedup")
    return f"{x:.2f}x" + fmt_ci(ci, pct=False)


def groups_of(report: dict) -> list[tuple[str, dict]]:
    levels = [(f"level {lv}", g) for lv, g in report["summary"]["levels"].items()]
    return levels + ([("all", report["summary"]["all"])] if len(levels) > 1 else [])


PROBLEM_COLUMNS = ["problem", "samples", "correct", "pass@1", "best speedup"]


def problem_rows(report: dict) -> list[list[str]]:
    return [[p["problem_key"], str(p["n"]), str(p["correct"]), fmt_rate(p["pass_at_1"]),
             fmt_speedup(p["best_speedup"], p)] for p in report["problems"]]


def print_tables(report: dict) -> None:
    title = f"{report['run_name']}  model={report['model']}  prompt={report['prompt_style']}  " \
            f"devices={','.join(report['devices'])}"
    outcome = Table(title=title, caption="[dim]95% intervals in brackets: Wilson on rates, bootstrap over "
                                          "problems on fast_p and the geomean speedup[/]")
    for col in ("", "problems", "samples", "compiled", "correct", "rejected", "geomean speedup"):
        outcome.add_column(col, justify="right")
    for name, g in groups_of(report):
        outcome.add_row(name, str(g["n_problems"]), str(g["n_samples"]), fmt_rate_ci(g, "compiled_rate"),
                        fmt_rate_ci(g, "correct_rate"), fmt_rate_ci(g, "rejected_rate"),
                        fmt_speedup(g["geomean_speedup"], g))
    stdout.print(outcome)

    # metrics as rows, levels as columns: fits an 80-column terminal with any number of thresholds
    names = [name for name, _ in groups_of(report)]
    fast = Table(title="fast_p, pass@k, outcomes")
    fast.add_column("metric")
    for name in names:
        fast.add_column(name, justify="right")
    for p in FAST_P_THRESHOLDS:
        fast.add_row(f"fast_{p:g}", *[fmt_fast(g, f"{p:g}") for _, g in groups_of(report)])
    for k in PASS_AT_K:
        fast.add_row(f"pass@{k}", *[fmt_rate(g["pass_at_k"][str(k)]) for _, g in groups_of(report)])
    for s in STATUSES:
        fast.add_row(f"[dim]{s}[/]", *[str(g["status_counts"][s]) for _, g in groups_of(report)])
    stdout.print(fast)

    problems = Table(title="per problem")
    for col in PROBLEM_COLUMNS:
        problems.add_column(col, justify="left" if col == "problem" else "right")
    for row in problem_rows(report):
        problems.add_row(*row)
    stdout.print(problems)
    if report.get("kernelbench"):
        from kbencheval.bench.kernelbench import print_comparison

        print_comparison(report["kernelbench"])

    if report["n_results"] < report["n_generations"]:
        stdout.print(f"[yellow]{report['n_results']} of {report['n_generations']} generations evaluated; "
                     f"run `kbench eval run_name={report['run_name']}` to finish[/]")
    if note := comparison_only_note(report):
        stdout.print(f"[yellow]{note}[/]")
    if any(g["n_correct_untimed"] for _, g in groups_of(report)):
        stdout.print("[yellow]some correct samples have no meaningful timing (CPU interpreter): "
                     f"their speedups are shown as '{UNTIMED}'[/]")


# ---------------------------------------------------------------- plots and HTML

def _figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _no_data(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def make_plots(report: dict, records: list[dict]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    untimed_note = "no meaningful timings\n(CPU interpreter, or no correct samples)"
    plots = {}
    speedups = [s for s in map(timed_speedup, records) if s is not None]

    fig, ax = plt.subplots(figsize=(6, 3.5))
    if speedups:
        bins = np.logspace(np.log2(min(speedups)) - 0.1, np.log2(max(speedups)) + 0.1, 25, base=2)
        ax.hist(speedups, bins=bins, color="#4c72b0")
        ax.set_xscale("log", base=2)
        ax.axvline(1.0, color="k", ls="--", lw=1)
        ax.set_xlabel("speedup over PyTorch reference (log scale)")
        ax.set_ylabel("correct samples")
    else:
        _no_data(ax, untimed_note)
    ax.set_title("speedup distribution (correct, timed samples)")
    plots["speedup_distribution"] = _figure_png(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    by_level: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        by_level[int(r.get("level", 0))].append(r)
    ps = np.linspace(0, max(2.5, max(speedups, default=0) * 1.05), 200)
    drawn = False
    for level, rs in sorted(by_level.items()):
        curve = [fast_p(rs, p) for p in ps]
        if all(v is not None for v in curve):
            ax.plot(ps, curve, label=f"level {level}")
            drawn = True
        else:
            ax.plot([0], [fast_p(rs, 0)], "o", label=f"level {level}: fast_0 only (untimed)")
    for p in FAST_P_THRESHOLDS:
        ax.axvline(p, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    ax.set_title("fast_p curve" if drawn else "fast_p curve: only fast_0 is defined without timings")
    plots["fast_p_curve"] = _figure_png(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    colors = {"correct": "#55a868", "incorrect": "#dd8452", "timeout": "#8172b3", "runtime_error": "#c44e52",
              "compile_error": "#937860", "rejected": "#000000", "format_error": "#bbbbbb"}
    levels = sorted(by_level)
    bottom = np.zeros(len(levels))
    for s in STATUSES:
        frac = np.array([sum(1 for r in by_level[lv] if r.get("status") == s) / len(by_level[lv]) for lv in levels])
        ax.bar([f"level {lv}" for lv in levels], frac, bottom=bottom, label=s, color=colors[s])
        bottom += frac
    ax.set_ylabel("fraction of samples")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title("outcomes by level")
    plots["outcomes_by_level"] = _figure_png(fig)

    timed = [p for p in report["problems"] if p["median_speedup"] is not None]
    slowest = sorted(timed, key=lambda p: p["median_speedup"])[:15]
    fig, ax = plt.subplots(figsize=(6, max(2.5, 0.3 * len(slowest) + 1)))
    if slowest:
        ax.barh([p["problem_key"] for p in slowest][::-1], [p["median_speedup"] for p in slowest][::-1],
                color="#c44e52")
        ax.axvline(1.0, color="k", ls="--", lw=1)
        ax.set_xlabel("median speedup of correct samples")
    else:
        _no_data(ax, untimed_note)
    ax.set_title("slowest problems")
    plots["slowest_problems"] = _figure_png(fig)
    return plots


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(report: dict, plots: dict[str, bytes], path: Path) -> None:
    groups = groups_of(report)
    outcome = _html_table(
        ["", "problems", "samples", "compiled", "correct", "rejected", "geomean speedup"],
        [[n, str(g["n_problems"]), str(g["n_samples"]), fmt_rate_ci(g, "compiled_rate"),
          fmt_rate_ci(g, "correct_rate"), fmt_rate_ci(g, "rejected_rate"), fmt_speedup(g["geomean_speedup"], g)]
         for n, g in groups])
    fast = _html_table(
        [""] + [f"fast_{p:g}" for p in FAST_P_THRESHOLDS] + [f"pass@{k}" for k in PASS_AT_K],
        [[n] + [fmt_fast(g, f"{p:g}") for p in FAST_P_THRESHOLDS] + [fmt_rate(g["pass_at_k"][str(k)])
                                                                       for k in PASS_AT_K] for n, g in groups])
    problems = _html_table(PROBLEM_COLUMNS, problem_rows(report))
    if report.get("kernelbench"):
        from kbencheval.bench.kernelbench import comparison_tables

        head, rows, shead, srows = comparison_tables(report["kernelbench"])
        problems += (f"<h2>KernelBench recorded vs ours</h2><p>{html.escape(report['kernelbench']['source'])}</p>"
                     + _html_table(head, rows) + _html_table(shead, srows))
    images = "".join(
        f'<figure><img src="data:image/png;base64,{base64.b64encode(png).decode()}" alt="{name}">'
        f"<figcaption>{name.replace('_', ' ')}</figcaption></figure>" for name, png in plots.items())
    meta = (f"model {report['model']} · prompt {report['prompt_style']} · backend {report['backend']} · "
            f"devices {', '.join(report['devices'])} · {report['n_results']} of {report['n_generations']} "
            "generations evaluated")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(report['run_name'])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}} figure{{display:inline-block;margin:8px}}</style>
</head><body><h1>{html.escape(report['run_name'])}</h1><p>{html.escape(meta)}</p>
{f"<p><b>{html.escape(comparison_only_note(report))}</b></p>" if comparison_only_note(report) else ""}
<h2>Outcomes</h2>{outcome}<h2>fast_p and pass@k</h2>
<p>fast_p: fraction of samples that are correct with speedup &gt; p; fast_0 is the correct rate.
"{UNTIMED}": correct samples were not timed meaningfully (CPU interpreter), so no speedup is claimed.</p>{fast}
<h2>Per problem</h2>{problems}
<h2>Plots</h2>{images}</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)


# ---------------------------------------------------------------- tables for pandas, spreadsheets, notebooks

def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = parse_args(list(argv or []))
        if cfg is None:
            return 0
        if cfg.run_b:
            from kbencheval.bench.compare import compare_main

            return compare_main(cfg)
        run = run_dir(cfg.runs_dir, cfg.run_name)
        report = build_report(run)
        records = list(read_results(run / RESULTS)[0].values())
        html_path = Path(cfg.html) if cfg.html else run / "report.html"
        plots = make_plots(report, records)
        plot_dir = html_path.parent / f"{html_path.stem}_plots"
        plot_dir.mkdir(parents=True, exist_ok=True)
        for name, png in plots.items():
            (plot_dir / f"{name}.png").write_bytes(png)
        write_html(report, plots, html_path)
        report["html"] = str(html_path)
        report["tables"] = [str(p) for p in write_tables(html_path.with_suffix(""), {
            "problems": report["problems"], "samples": sample_rows(records)})]
        if cfg.json:
            print(json.dumps(report, indent=1))
        else:
            print_tables(report)
            console.print(f"HTML report: {html_path} (plots in {plot_dir}; {tables_note(report['tables'])})")
        return 0

    return cli_main("report", body)
