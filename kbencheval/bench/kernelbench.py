"""KernelBench run folders in and out: re-judge the kernels KernelBench's scripts generated, set our
verdicts beside the numbers its eval recorded, and write ours back in its `eval_results.json` format.

    kbench kernelbench import ~/KernelBench/runs/deepseek_l1 dataset_src=huggingface device=cuda
    kbench kernelbench import runs_kb/tiny run_name=tiny_rejudged dataset_src=bundled device=cpu
    kbench kernelbench export tiny_rejudged                  # -> runs/tiny_rejudged/eval_results.json
    kbench report tiny_rejudged                              # their numbers and ours, side by side

A KernelBench run folder (scripts/generate_samples.py, eval_from_generations.py) holds
    level_<L>_problem_<P>_sample_<S>_kernel.py    one extracted kernel per (problem, sample)
    generation_config.yaml                        the generation settings (dataset_src, backend, model, ...)
    eval_results.json                             {problem_id: [{sample_id, compiled, correctness, metadata,
                                                   runtime, runtime_stats, ref_runtime?, ...}]}, times in ms
Older KernelBench versions wrote one record per problem instead of a list, or a dict keyed by sample id;
all three are read. Import copies the kernels into an ordinary run (manifest, generations) plus
`kernelbench_recorded.json` (their verdicts, normalised), then evaluates it like `kbench eval`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from kbencheval.bench.common import cli_main, console, now_iso, require, stdout
from kbencheval.bench.config import EVAL_ALIASES, EvaluatorPoolConfig, eval_config_field, load_cli_config
from kbencheval.bench.metrics import geomean_speedup, timed_speedup
from kbencheval.bench.store import (
    MANIFEST,
    RESULTS,
    Generation,
    RunError,
    generation_path,
    read_json,
    read_results,
    run_dir,
    write_json_atomic,
)
from kbencheval.config import ConfigError, config_help
from kbencheval.eval import EvalConfig

RECORDED = "kernelbench_recorded.json"
KB_RESULTS = "eval_results.json"
_KERNEL_RE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_BACKENDS = ("triton", "cuda")


# ---------------------------------------------------------------- reading their folder

def kernel_files(kb_run: Path) -> dict[tuple[int, int, int], Path]:
    """(level, problem_id, sample_id) -> kernel file."""
    found = {}
    for path in kb_run.iterdir():
        if m := _KERNEL_RE.match(path.name):
            found[tuple(int(g) for g in m.groups())] = path
    return found


def _num(x) -> float | None:
    """KernelBench writes -1.0 for a time it did not measure."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 else None


def normalise_entry(level: int, problem_id: int, entry: dict) -> dict:
    runtime, ref = _num(entry.get("runtime")), _num(entry.get("ref_runtime"))
    correct = bool(entry.get("correctness"))
    meta = entry.get("metadata") or {}
    error = next((f"{k}: {meta[k]}" for k in ("compilation_error", "runtime_error", "correctness_issue",
                                               "cuda_error", "other_error") if meta.get(k)), "")
    return {"level": level, "problem_id": problem_id, "sample": int(entry.get("sample_id", 0)),
            "compiled": bool(entry.get("compiled")), "correct": correct, "runtime_ms": runtime,
            "ref_runtime_ms": ref, "speedup": ref / runtime if correct and runtime and ref else None,
            "error": str(error)[:300]}


def parse_eval_results(obj: dict, level: int) -> list[dict]:
    """Their eval_results.json, in any of its three shapes, as normalised records sorted by (problem, sample)."""
    if not isinstance(obj, dict):
        raise RunError(f"{KB_RESULTS} is not a JSON object keyed by problem id; is it KernelBench's?")
    out = []
    for pid, value in obj.items():
        if not str(pid).isdigit():
            raise RunError(f"{KB_RESULTS} has key {pid!r}; KernelBench keys results by problem id")
        if isinstance(value, dict) and "compiled" in value:  # one sample per problem (early versions)
            entries = [value]
        elif isinstance(value, dict):  # keyed by sample id
            entries = [{"sample_id": int(s), **e} for s, e in value.items()]
        elif isinstance(value, list):
            entries = value
        else:
            raise RunError(f"{KB_RESULTS}: problem {pid} holds {type(value).__name__}, not a result list")
        out += [normalise_entry(level, int(pid), e) for e in entries]
    return sorted(out, key=lambda r: (r["problem_id"], r["sample"]))


def read_generation_config(kb_run: Path) -> dict:
    path = kb_run / "generation_config.yaml"
    if not path.is_file():
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        console.print(f"[yellow]{path} is not plain YAML; set dataset_src, backend and model_name yourself[/]")
        return {}
    return data if isinstance(data, dict) else {}


# ---------------------------------------------------------------- import

@dataclasses.dataclass(kw_only=True)
class ImportConfig(EvaluatorPoolConfig):
    kb_run: str = ""
    """The KernelBench run folder (runs/<run_name> of a KernelBench checkout)."""
    run_name: str = ""
    """Our run folder to write under runs_dir; empty = <KernelBench run name>_rejudged."""
    runs_dir: str = "runs"
    dataset_src: str = ""
    """bundled | local | huggingface; empty = the dataset_src in the run's generation_config.yaml."""
    dataset_path: str = ""
    """KernelBench folder (local) or dataset id (huggingface); empty = generation_config.yaml's dataset_name."""
    level: int = 0
    """0 = the level in the kernel file names."""
    backend: str = ""
    """triton | cuda; empty = generation_config.yaml's backend (KernelBench's default: cuda)."""
    evaluate: bool = True
    """False: import only; `kbench eval run_name=...` judges it later."""
    verbose: bool = False
    eval: EvalConfig = eval_config_field()
    """The evaluator (kbencheval.eval.trusted.harness.EvalConfig), as in `kbench eval`."""


def import_run(cfg: ImportConfig) -> Path:
    """Write our run folder from a KernelBench one; returns it. Rerunning adds what is new."""
    from kbencheval.bench.generate import problem_entry
    from kbencheval.dataset import load_problems

    kb = Path(cfg.kb_run).expanduser()
    if not kb.is_dir():
        raise RunError(f"{kb} is not a folder; pass the KernelBench run folder (runs/<run_name>)")
    kernels = kernel_files(kb)
    levels = sorted({lv for lv, _, _ in kernels}) or ([cfg.level] if cfg.level else [])
    if cfg.level:
        kernels = {k: p for k, p in kernels.items() if k[0] == cfg.level}
        levels = [cfg.level]
    if not kernels:
        raise RunError(f"{kb} has no level_<L>_problem_<P>_sample_<S>_kernel.py files"
                       + (f" for level {cfg.level}" if cfg.level else "") + "; is it a KernelBench run folder?")
    if len(levels) > 1:
        raise ConfigError(f"{kb} holds kernels of levels {levels}; import one at a time with level=N")
    level = levels[0]
    gen_cfg = read_generation_config(kb)
    dataset_src = cfg.dataset_src or gen_cfg.get("dataset_src") or "huggingface"
    dataset_path = cfg.dataset_path or (gen_cfg.get("dataset_name", "") if dataset_src == "huggingface" else "")
    backend = cfg.backend or gen_cfg.get("backend") or "cuda"
    if backend not in _BACKENDS:
        raise ConfigError(f"the run's backend is {backend!r}; this evaluator judges {' and '.join(_BACKENDS)} "
                          "kernels (set backend=triton|cuda if the files are mislabelled)")
    problems = {p.problem_id: p for p in load_problems(dataset_src, level, path=dataset_path or None)}
    missing = sorted({pid for _, pid, _ in kernels} - set(problems))
    if missing:
        raise RunError(f"level {level} of {dataset_src} has no problems {missing[:5]}; the run was generated "
                       "from another dataset: set dataset_src= and dataset_path=")

    run = run_dir(cfg.runs_dir, cfg.run_name or f"{kb.name}_rejudged")
    used = {pid: problems[pid] for _, pid, _ in kernels}
    if (run / MANIFEST).exists():
        old = read_json(run / MANIFEST)
        if old.get("kernelbench_run") != str(kb.resolve()):
            raise RunError(f"{run} exists and was not imported from {kb}; pick another run_name")
        for e in old["problems"]:
            if e["problem_id"] in used and e["source_hash"] != used[e["problem_id"]].source_hash:
                raise RunError(f"problem {e['key']} changed since {run} was imported; import into a new run_name")
    model = str(gen_cfg.get("model_name", ""))
    write_json_atomic(run / MANIFEST, {
        "run_name": run.name, "created": now_iso(), "updated": now_iso(), "model": model,
        "server_type": str(gen_cfg.get("server_type", "")), "prompt_style": "kernelbench", "backend": backend,
        "kernelbench_run": str(kb.resolve()),
        "config": {"dataset_src": dataset_src, "dataset_path": dataset_path, "level": level, "backend": backend},
        "problems": [problem_entry(p) for p in sorted(used.values(), key=lambda p: p.problem_id)],
    })
    for (lv, pid, sample), path in sorted(kernels.items()):
        problem = problems[pid]
        gen_path = generation_path(run, problem.key, sample)
        text = path.read_text()
        if gen_path.exists():
            if Generation.from_dict(read_json(gen_path)).text != text:
                raise RunError(f"{gen_path} holds another kernel than {path}; import into a new run_name")
            continue
        write_json_atomic(gen_path, dataclasses.asdict(Generation(
            problem_key=problem.key, level=lv, problem_id=pid, sample=sample, messages=[], text=text, model=model,
            created=now_iso(), extra={"kernelbench_file": path.name})))
    recorded = parse_eval_results(read_json(kb / KB_RESULTS), level) if (kb / KB_RESULTS).is_file() else []
    write_json_atomic(run / RECORDED, {"source": str((kb / KB_RESULTS).resolve()), "records": recorded})
    console.print(f"imported {len(kernels)} kernel(s) of level {level} from {kb} into {run}"
                  f" ({len(recorded)} recorded KernelBench verdicts)")
    return run


# ---------------------------------------------------------------- side by side

def _rate(xs: list[bool]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def compare_recorded(run: Path) -> dict | None:
    """Their recorded verdicts and ours per (problem, sample), with both summaries; None without a record."""
    if not (run / RECORDED).is_file():
        return None
    theirs = {(r["problem_id"], r["sample"]): r for r in read_json(run / RECORDED)["records"]}
    ours = {(r["problem_id"], int(r["sample"])): r for r in read_results(run / RESULTS)[0].values()}
    rows = []
    for key in sorted(set(theirs) | set(ours)):
        t, o = theirs.get(key), ours.get(key)
        rows.append({
            "problem_id": key[0], "sample": key[1], "problem_key": o["problem_key"] if o else "",
            "kb_compiled": t["compiled"] if t else None, "kb_correct": t["correct"] if t else None,
            "kb_speedup": t["speedup"] if t else None, "kb_runtime_ms": t["runtime_ms"] if t else None,
            "status": o["status"] if o else None, "correct": bool(o["correct"]) if o else None,
            "speedup": timed_speedup(o) if o else None,
            "timed": bool(o and o.get("timing_meaningful")),
        })
    both = [r for r in rows if r["kb_correct"] is not None and r["correct"] is not None]
    kb_timed = [r["kb_speedup"] for r in both if r["kb_speedup"]]

    def count(kb: bool, us: bool) -> int:
        return sum(1 for r in both if r["kb_correct"] == kb and r["correct"] == us)

    return {
        "source": read_json(run / RECORDED)["source"],
        "n_recorded": len(theirs), "n_ours": len(ours), "n_both": len(both),
        "kernelbench": {"compiled_rate": _rate([r["kb_compiled"] for r in both]),
                        "correct_rate": _rate([r["kb_correct"] for r in both]),
                        "fast_1": (sum(1 for s in kb_timed if s > 1) / len(both)) if both and kb_timed else None,
                        "geomean_speedup": geomean_speedup({"correct": True, "timing_meaningful": True, "speedup": s}
                                                           for s in kb_timed)},
        "ours": {"compiled_rate": _rate([bool(ours[(r["problem_id"], r["sample"])].get("compiled")) for r in both]),
                 "correct_rate": _rate([r["correct"] for r in both]),
                 "geomean_speedup": geomean_speedup(ours[(r["problem_id"], r["sample"])] for r in both)},
        "agreement": {"both_correct": count(True, True), "both_wrong": count(False, False),
                      "only_kernelbench_correct": count(True, False), "only_ours_correct": count(False, True)},
        "rows": rows,
    }


def _fmt(x, kind: str = "rate") -> str:
    if x is None:
        return "-"
    if kind == "rate":
        return f"{100 * x:.1f}%"
    if kind == "x":
        return f"{x:.2f}x"
    return str(x)


def comparison_tables(cmp: dict) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """(summary header, rows, per-sample header, rows) of the side-by-side view, as strings."""
    kb, us = cmp["kernelbench"], cmp["ours"]
    summary = [["compiled", _fmt(kb["compiled_rate"]), _fmt(us["compiled_rate"])],
               ["correct", _fmt(kb["correct_rate"]), _fmt(us["correct_rate"])],
               ["geomean speedup", _fmt(kb["geomean_speedup"], "x"), _fmt(us["geomean_speedup"], "x")]]
    summary += [[k.replace("_", " "), "", str(v)] for k, v in cmp["agreement"].items()]
    samples = [[f"{r['problem_id']}", str(r["sample"]), r["problem_key"] or "-",
                "-" if r["kb_correct"] is None else ("correct" if r["kb_correct"] else
                                                     "compiled" if r["kb_compiled"] else "failed"),
                _fmt(r["kb_speedup"], "x"), r["status"] or "not evaluated",
                _fmt(r["speedup"], "x") if r["speedup"] or not r["correct"] else "untimed"]
               for r in cmp["rows"]]
    return (["", "KernelBench (recorded)", "kbencheval (ours)"], summary,
            ["problem", "sample", "our key", "KernelBench", "KB speedup", "ours", "our speedup"], samples)


def print_comparison(cmp: dict) -> None:
    from rich.table import Table

    head, rows, shead, srows = comparison_tables(cmp)
    table = Table(title=f"KernelBench recorded vs ours ({cmp['n_both']} samples judged by both)")
    for col in head:
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    stdout.print(table)
    per = Table(title="per sample")
    for col in shead:
        per.add_column(col, justify="left" if col == "our key" else "right")
    for row in srows:
        per.add_row(*row)
    stdout.print(per)


# ---------------------------------------------------------------- export

def _stats_ms(stats: dict | None) -> dict:
    if not stats:
        return {}
    return {"mean": stats["mean_us"] / 1e3, "std": stats["std_us"] / 1e3, "median": stats["median_us"] / 1e3,
            "p10": stats["p10_us"] / 1e3, "p90": stats["p90_us"] / 1e3, "num_trials": stats["n"]}


def to_kernelbench(records: list[dict]) -> dict:
    """Our records in KernelBench's eval_results.json shape (times in ms, -1.0 when not measured)."""
    out: dict[str, list[dict]] = {}
    for r in sorted(records, key=lambda r: (r["problem_id"], int(r["sample"]))):
        timed = bool(r.get("timing_meaningful")) and r.get("runtime_us") is not None
        out.setdefault(str(r["problem_id"]), []).append({
            "sample_id": int(r["sample"]),
            "compiled": bool(r.get("compiled")),
            "correctness": bool(r.get("correct")),
            "metadata": {"kbench_status": r.get("status", ""), "error": r.get("error", ""),
                         "device": r.get("device", ""), "timing_meaningful": bool(r.get("timing_meaningful"))},
            "runtime": r["runtime_us"] / 1e3 if timed else -1.0,
            "runtime_stats": _stats_ms(r.get("runtime_stats")) if timed else {},
            "ref_runtime": r["ref_runtime_us"] / 1e3 if timed and r.get("ref_runtime_us") else -1.0,
            "ref_runtime_stats": _stats_ms(r.get("ref_runtime_stats")) if timed else {},
        })
    return out


def export_run(run: Path, out: Path | None = None, level: int = 0) -> Path:
    records = list(read_results(run / RESULTS)[0].values())
    if not records:
        raise RunError(f"{run / RESULTS} has no results; run `kbench eval run_name={run.name}` first")
    levels = sorted({int(r["level"]) for r in records})
    if level:
        records = [r for r in records if int(r["level"]) == level]
    elif len(levels) > 1:
        raise ConfigError(f"run {run.name} has levels {levels}; KernelBench keeps one level per file: set level=N")
    out = out or run / KB_RESULTS
    write_json_atomic(out, to_kernelbench(records))
    return out


@dataclasses.dataclass(kw_only=True)
class ExportConfig:
    run_name: str = ""
    runs_dir: str = "runs"
    out: str = ""
    """Where to write; empty = runs/<name>/eval_results.json."""
    level: int = 0
    """Which level to write when the run has several (KernelBench keeps one level per file)."""


# ---------------------------------------------------------------- CLI

USAGE = "kbench kernelbench import KB_RUN_DIR [key=value ...] | kbench kernelbench export RUN [key=value ...]"
IMPORT_EXAMPLE = "kbench kernelbench import ~/KernelBench/runs/ds_l1 dataset_src=huggingface device=cuda"


def _positional(argv: list[str], key: str) -> list[str]:
    return [a if "=" in a or a.startswith("-") else f"{key}={a}" for a in argv]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("kbench kernelbench import: re-judge a KernelBench run folder with this evaluator (their numbers "
              "beside ours in `kbench report`)\nkbench kernelbench export: write a run's results as KernelBench's "
              "eval_results.json (keys: run_name, runs_dir, out, level)\n")
        print(config_help(ImportConfig, USAGE, IMPORT_EXAMPLE, EVAL_ALIASES))
        return 0
    action, rest = argv[0], argv[1:]
    if action == "import":
        return cli_main("kernelbench import", lambda: _import(rest))
    if action == "export":
        return cli_main("kernelbench export", lambda: _export(rest))
    print(f"kbench kernelbench: unknown action '{action}'; choose import or export", file=sys.stderr)
    return 2


def _import(argv: list[str]) -> int:
    from kbencheval.bench.evaluate import EvalRunConfig, evaluate_run

    cfg = load_cli_config(ImportConfig, _positional(argv, "kb_run"), USAGE, IMPORT_EXAMPLE, EVAL_ALIASES)
    if cfg is None:
        return 0
    require(cfg.kb_run, "name the KernelBench run folder: `kbench kernelbench import runs/NAME`")
    run = import_run(cfg)
    if not cfg.evaluate:
        console.print(f"judge it with `kbench eval run_name={run.name} runs_dir={cfg.runs_dir}`")
        return 0
    pool = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(EvaluatorPoolConfig)}
    stats = evaluate_run(EvalRunConfig(run_name=run.name, runs_dir=cfg.runs_dir, verbose=cfg.verbose,
                                       eval=cfg.eval, **pool))
    for err in stats["harness_errors"][:10]:
        console.print(f"[red]harness error (sample not recorded; rerun to retry): {err}[/]")
    print_comparison(compare_recorded(run))
    console.print(f"full report: `kbench report {run.name} runs_dir={cfg.runs_dir}`; "
                  f"KernelBench format: `kbench kernelbench export {run.name} runs_dir={cfg.runs_dir}`")
    return 1 if stats["harness_errors"] else 0


def _export(argv: list[str]) -> int:
    cfg = load_cli_config(ExportConfig, _positional(argv, "run_name"), USAGE,
                          "kbench kernelbench export qwen_l1 out=/tmp/eval_results.json")
    if cfg is None:
        return 0
    require(cfg.run_name, "name the run: `kbench kernelbench export NAME`")
    out = export_run(run_dir(cfg.runs_dir, cfg.run_name), Path(cfg.out) if cfg.out else None, cfg.level)
    console.print(f"wrote {out} (KernelBench's eval_results.json format; times in ms, -1.0 = not timed)")
    return 0
