"""Two evaluated runs side by side, with paired differences per problem.

    kbench report base_prompt new_prompt                 # tables + runs/base_prompt_vs_new_prompt.html
    kbench report base_prompt new_prompt --json          # machine output on stdout

Each run keeps its own intervals (Wilson on rates, bootstrap over problems on fast_p and the geomean).
The differences are B - A over the problems both runs evaluated, with a paired bootstrap interval
(kbencheval.bench.metrics.paired_bootstrap): a problem's two numbers move together, so the paired
interval is far tighter than the two runs' own intervals suggest. The speedup difference is a ratio
of per-problem geomeans, over problems timed in both runs.
"""

from __future__ import annotations

import html
import json
import math
from collections import defaultdict
from pathlib import Path

from rich.table import Table

from kbencheval.bench.common import console, stdout
from kbencheval.bench.metrics import fast_p, geomean_speedup, paired_bootstrap
from kbencheval.bench.report import build_report, fmt_fast, fmt_rate, fmt_rate_ci, fmt_speedup
from kbencheval.bench.tables import tables_note, write_tables
from kbencheval.bench.store import RESULTS, read_results, run_dir

PAIRED_RESAMPLES = 5000


def _by_problem(records: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        out[r["problem_key"]].append(r)
    return out


def compare_runs(a: dict, b: dict, records_a: list[dict], records_b: list[dict]) -> dict:
    """The comparison document: both runs' overall summaries, per-problem rows and paired differences."""
    ra, rb = _by_problem(records_a), _by_problem(records_b)
    common = sorted(set(ra) & set(rb), key=lambda k: (ra[k][0].get("level", 0), ra[k][0].get("problem_id", 0), k))
    rows = []
    for key in common:
        pa, pb = ra[key], rb[key]
        ca, cb = [sum(1 for r in rs if r.get("correct")) / len(rs) for rs in (pa, pb)]
        fa, fb = fast_p(pa, 1.0), fast_p(pb, 1.0)
        ga, gb = geomean_speedup(pa), geomean_speedup(pb)
        rows.append({"problem_key": key, "level": pa[0].get("level", 0), "n_a": len(pa), "n_b": len(pb),
                     "correct_a": ca, "correct_b": cb, "correct_diff": cb - ca,
                     "fast_1_a": fa, "fast_1_b": fb, "fast_1_diff": None if fa is None or fb is None else fb - fa,
                     "speedup_a": ga, "speedup_b": gb, "speedup_ratio": gb / ga if ga and gb else None})
    paired = {}
    if rows:
        paired["correct"] = paired_bootstrap([r["correct_a"] for r in rows], [r["correct_b"] for r in rows],
                                             resamples=PAIRED_RESAMPLES)
        if all(r["fast_1_diff"] is not None for r in rows):
            paired["fast_1"] = paired_bootstrap([r["fast_1_a"] for r in rows], [r["fast_1_b"] for r in rows],
                                                resamples=PAIRED_RESAMPLES)
        timed = [r for r in rows if r["speedup_ratio"]]
        if timed:
            logs = paired_bootstrap([math.log(r["speedup_a"]) for r in timed],
                                    [math.log(r["speedup_b"]) for r in timed], resamples=PAIRED_RESAMPLES)
            paired["speedup_ratio"] = {"ratio": math.exp(logs["diff"]), "lo": math.exp(logs["lo"]),
                                       "hi": math.exp(logs["hi"]), "n": logs["n"]}
    return {
        "a": {k: a[k] for k in ("run_name", "model", "prompt_style", "devices", "n_results")} | {"all": a["summary"]["all"]},
        "b": {k: b[k] for k in ("run_name", "model", "prompt_style", "devices", "n_results")} | {"all": b["summary"]["all"]},
        "n_common_problems": len(rows),
        "only_a": sorted(set(ra) - set(rb)),
        "only_b": sorted(set(rb) - set(ra)),
        "paired": paired,
        "problems": rows,
    }


def _fmt_diff(d: dict | None, pct: bool = True) -> str:
    if not d:
        return "-"
    if "ratio" in d:
        return f"x{d['ratio']:.2f} [{d['lo']:.2f}-{d['hi']:.2f}]"
    return f"{100 * d['diff']:+.1f} [{100 * d['lo']:+.0f},{100 * d['hi']:+.0f}]"  # percentage points


def summary_rows(cmp: dict) -> list[list[str]]:
    ga, gb, paired = cmp["a"]["all"], cmp["b"]["all"], cmp["paired"]
    rows = [["problems", str(ga["n_problems"]), str(gb["n_problems"]), f"{cmp['n_common_problems']} in common"],
            ["samples", str(ga["n_samples"]), str(gb["n_samples"]), ""],
            ["compiled", fmt_rate_ci(ga, "compiled_rate"), fmt_rate_ci(gb, "compiled_rate"), ""],
            ["correct", fmt_rate_ci(ga, "correct_rate"), fmt_rate_ci(gb, "correct_rate"),
             _fmt_diff(paired.get("correct"))],
            ["fast_1", fmt_fast(ga, "1"), fmt_fast(gb, "1"), _fmt_diff(paired.get("fast_1"))],
            ["fast_2", fmt_fast(ga, "2"), fmt_fast(gb, "2"), ""],
            ["geomean speedup", fmt_speedup(ga["geomean_speedup"], ga), fmt_speedup(gb["geomean_speedup"], gb),
             _fmt_diff(paired.get("speedup_ratio"))],
            ["pass@1", fmt_rate(ga["pass_at_k"]["1"]), fmt_rate(gb["pass_at_k"]["1"]), ""]]
    return rows


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def problem_rows(cmp: dict) -> list[list[str]]:
    return [[r["problem_key"], f"{round(r['correct_a'] * r['n_a'])}/{r['n_a']}",
             f"{round(r['correct_b'] * r['n_b'])}/{r['n_b']}", f"{100 * r['correct_diff']:+.0f} pts", _x(r["speedup_a"]), _x(r["speedup_b"]),
             "-" if r["speedup_ratio"] is None else f"x{r['speedup_ratio']:.2f}"] for r in cmp["problems"]]


PROBLEM_HEADER = ["problem", "correct A", "correct B", "B - A", "speedup A", "speedup B", "B / A"]


def print_comparison(cmp: dict) -> None:
    a, b = cmp["a"]["run_name"], cmp["b"]["run_name"]
    table = Table(title=f"A = {a} ({cmp['a']['model']})   B = {b} ({cmp['b']['model']})",
                  caption="[dim]95% intervals: Wilson / bootstrap per run; B - A in percentage points (speedup: "
                          "ratio), paired over common problems[/]")
    for col in ("", "A", "B", "B - A (paired)"):
        table.add_column(col, justify="right")
    for row in summary_rows(cmp):
        table.add_row(*row)
    stdout.print(table)
    per = Table(title="per problem (problems in both runs)")
    for col in PROBLEM_HEADER:
        per.add_column(col, justify="left" if col == "problem" else "right")
    for row in problem_rows(cmp):
        per.add_row(*row)
    stdout.print(per)
    for side, keys in (("A", cmp["only_a"]), ("B", cmp["only_b"])):
        if keys:
            stdout.print(f"[yellow]{len(keys)} problem(s) only in {side}, left out of the paired columns: "
                         f"{', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}[/]")


def _scatter_png(cmp: dict) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 4.2))
    xs = [r["correct_a"] for r in cmp["problems"]]
    ys = [r["correct_b"] for r in cmp["problems"]]
    ax.scatter(xs, ys, alpha=0.6, color="#4c72b0")
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, ls="--")
    ax.set(xlim=(-0.05, 1.05), ylim=(-0.05, 1.05), xlabel=f"A: {cmp['a']['run_name']}",
           ylabel=f"B: {cmp['b']['run_name']}", title="correct fraction per problem")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def write_html(cmp: dict, path: Path) -> None:
    import base64

    def table(header, rows):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    a, b = cmp["a"], cmp["b"]
    title = f"{a['run_name']} vs {b['run_name']}"
    png = base64.b64encode(_scatter_png(cmp)).decode()
    only = "".join(f"<p>{len(keys)} problem(s) only in {side}: {html.escape(', '.join(keys))}</p>"
                   for side, keys in (("A", cmp["only_a"]), ("B", cmp["only_b"])) if keys)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}} table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}} td:first-child{{text-align:left}}
.row{{display:flex;gap:2em;align-items:flex-start}}</style></head><body><h1>{html.escape(title)}</h1>
<p>A = {html.escape(a['run_name'])} (model {html.escape(a['model'])}, prompt {html.escape(a['prompt_style'])},
{a['n_results']} results) · B = {html.escape(b['run_name'])} (model {html.escape(b['model'])},
prompt {html.escape(b['prompt_style'])}, {b['n_results']} results)</p>
<p>Brackets: 95% intervals (Wilson on rates, bootstrap over problems on fast_p and the geomean speedup).
B - A, in percentage points, is paired over the {cmp['n_common_problems']} problems both runs evaluated (paired bootstrap); the speedup
column is the ratio of per-problem geomeans, over problems timed in both.</p>
<div class="row">{table(["", "A", "B", "B - A (paired)"], summary_rows(cmp))}
<img src="data:image/png;base64,{png}" alt="correct fraction per problem"></div>{only}
<h2>Per problem</h2>{table(PROBLEM_HEADER, problem_rows(cmp))}</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)


def compare_main(cfg) -> int:
    """`kbench report A B`: cfg is the report's ReportConfig with run_b set."""
    reports, records = [], []
    for name in (cfg.run_name, cfg.run_b):
        run = run_dir(cfg.runs_dir, name)
        reports.append(build_report(run))
        records.append(list(read_results(run / RESULTS)[0].values()))
    cmp = compare_runs(*reports, *records)
    html_path = Path(cfg.html) if cfg.html else Path(cfg.runs_dir) / f"{cfg.run_name}_vs_{cfg.run_b}.html"
    write_html(cmp, html_path)
    cmp["html"] = str(html_path)
    cmp["tables"] = [str(p) for p in write_tables(html_path.with_suffix(""), {"problems": cmp["problems"]})]
    if cfg.json:
        print(json.dumps(cmp, indent=1))
    else:
        print_comparison(cmp)
        console.print(f"HTML: {html_path}; per-problem {tables_note(cmp['tables'])}")
    return 0

