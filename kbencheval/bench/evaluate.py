"""Evaluate every generation of a run on all local GPUs (or the CPU); resumable and kill-safe.

    kbench eval run_name=qwen_l1                     # every visible GPU, else the CPU interpreter
    kbench eval run_name=qwen_l1 device=cuda num_gpus=4 eval.timeout_s=300 eval.timing_mode=cuda_graph
    kbench eval run_name=tiny device=cpu cpu_evaluators=2
    kbench eval run_name=qwen_l1 placement=ray ray_address=auto device=cuda    # every GPU of a Ray cluster

An EvaluatorPool (kbencheval.eval.pool) hands the next (problem, sample) to whichever evaluator is free,
so no GPU waits on another's slow sample. Each result is appended to runs/<name>/results.jsonl the
moment it exists, by this process; a rerun skips exactly the (problem, sample) pairs already there.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

from kbencheval.bench.common import cli_main, console, make_progress, require
from kbencheval.bench.store import (
    MANIFEST,
    RESULTS,
    Generation,
    ResultsLog,
    RunError,
    list_generations,
    read_json,
    run_dir,
)
from kbencheval.bench.config import EVAL_ALIASES, EvaluatorPoolConfig, eval_config_field, load_cli_config
from kbencheval.dataset import Problem, load_problems
from kbencheval.eval import EvalConfig
from kbencheval.eval import EvalResult, Status


@dataclasses.dataclass(kw_only=True)
class EvalRunConfig(EvaluatorPoolConfig):
    run_name: str = ""
    runs_dir: str = "runs"
    backend: str = ""
    """Kernel language; empty = the one the run was generated for."""
    verbose: bool = False
    """Print every verdict as it arrives."""
    eval: EvalConfig = eval_config_field()
    """The evaluator (kbencheval.eval.trusted.harness.EvalConfig): eval.timing_mode=cuda_graph eval.baseline=compile ..."""



USAGE = "kbench eval run_name=NAME [key=value ...]   (also scripts/eval_from_generations.py)"
EXAMPLE = "kbench eval run_name=qwen_l1 device=cuda num_gpus=4 eval.timing_mode=cuda_graph eval.trials=5"


def run_problems(run: Path, manifest: dict) -> dict[str, Problem]:
    """The run's problems, reloaded from its dataset and checked against the hashes in the manifest."""
    cfg = manifest["config"]
    wanted = {e["key"]: e for e in manifest["problems"]}
    problems: dict[str, Problem] = {}
    for level in sorted({e["level"] for e in wanted.values()}):
        for p in load_problems(cfg["dataset_src"], level, path=cfg.get("dataset_path") or None):
            if p.key in wanted:
                if p.source_hash != wanted[p.key]["source_hash"]:
                    raise RunError(f"problem {p.key} changed since {run} was generated; regenerate into a new run")
                problems[p.key] = p
    missing = sorted(set(wanted) - set(problems))
    if missing:
        raise RunError(f"{cfg['dataset_src']} no longer has problems {missing[:5]} of run {run}; check dataset_path")
    return problems


def make_record(gen: Generation, result: EvalResult) -> dict:
    keys = {"problem_key": gen.problem_key, "level": gen.level, "problem_id": gen.problem_id, "sample": gen.sample}
    return {**keys, **result.to_dict()}


@dataclasses.dataclass
class EvalJob:
    """One candidate for the pool: what to run, and the keys written in front of its verdict."""

    keys: dict  # must hold problem_key and sample (the results log's key)
    problem: Problem | None
    text: str
    backend: str
    preset: EvalResult | None = None  # a verdict known without running (e.g. the generation failed)
    name: str = ""


def run_pool(todo: list, prepare, where: EvaluatorPoolConfig, eval_cfg: EvalConfig, log: ResultsLog, stats: dict, *,
             label: str, verbose: bool = False, item_name=str) -> None:
    """Evaluate `todo` on an EvaluatorPool placed as `where` says; each verdict is appended to `log` as it
    arrives.

    A prepare failure or a worker that crashed under a candidate is not a verdict: it goes to
    stats["harness_errors"] and a rerun retries it. Ctrl-C stops the run; everything written is kept.
    """
    from kbencheval.eval.pool.core import HOST_CRASHED

    jobs: list[EvalJob] = []
    for item in todo:
        try:
            jobs.append(prepare(item))
        except Exception as e:  # unreadable input, not a verdict: a rerun retries it
            stats["harness_errors"].append(f"{item_name(item)}: {type(e).__name__}: {e}")
    with make_progress() as progress:
        task = progress.add_task(f"{label} on {where.describe()}", total=len(todo))
        progress.advance(task, len(todo) - len(jobs))

        def record(job: EvalJob, result: EvalResult) -> None:
            if result.checks.get("pool") == HOST_CRASHED:
                stats["harness_errors"].append(f"{job.name}: {result.error}")
            else:
                log.append({**job.keys, **result.to_dict()})
                stats["evaluated"] += 1
                stats["status_counts"][result.status.value] += 1
            tally = " ".join(f"{s}={n}" for s, n in stats["status_counts"].most_common(3))
            progress.update(task, advance=1, description=f"{label} [{tally}]")
            if verbose:
                speed = f" speedup {result.speedup:.2f}x" if result.timing_meaningful and result.speedup else ""
                progress.console.print(f"{job.name}: {result.status.value}{speed}"
                                       f"{' - ' + result.error[:120] if result.error else ''}")

        for job in jobs:
            if job.preset is not None:
                record(job, job.preset)
        to_judge = [job for job in jobs if job.preset is None]
        if to_judge:
            with where.start_pool(eval_cfg) as pool:
                pool.evaluate([(job.problem, job.text, job.backend) for job in to_judge],
                              on_result=lambda i, result: record(to_judge[i], result))
                stats["shared_verdicts"] = pool.deduplicated


def evaluate_run(cfg: EvalRunConfig) -> dict:
    """Evaluate what is missing; returns {"evaluated", "skipped", "harness_errors", "status_counts"}."""
    cfg.check_placement()  # a device torch cannot use fails first, before problems are loaded
    run = run_dir(cfg.runs_dir, cfg.run_name)
    manifest = read_json(run / MANIFEST)
    backend = cfg.backend or manifest.get("backend", "triton")
    problems = run_problems(run, manifest)

    with ResultsLog(run / RESULTS) as log:
        generations = [g for g in list_generations(run) if g[0] in problems]
        todo = [g for g in generations if (g[0], g[1]) not in log.done]
        stats = {"evaluated": 0, "skipped": len(generations) - len(todo), "harness_errors": [],
                 "status_counts": Counter()}
        if log.unreadable_lines:
            console.print(f"[yellow]{log.path}: ignored {log.unreadable_lines} unreadable line(s) "
                          "(a torn write from a kill); those samples are evaluated again[/]")
        if not todo:
            console.print(f"[green]{cfg.run_name}: all {len(generations)} generations already evaluated[/]")
            return stats
        def prepare(item):
            key, sample, path = item
            gen = Generation.from_dict(read_json(path))
            keys = {"problem_key": gen.problem_key, "level": gen.level, "problem_id": gen.problem_id,
                    "sample": gen.sample}
            preset = None
            if gen.error:  # the request failed: nothing to run
                preset = EvalResult(status=Status.FORMAT_ERROR, problem=gen.problem_key,
                                    error=f"generation failed: {gen.error}")
            return EvalJob(keys, problems[key], gen.text, backend, preset, f"{gen.problem_key} #{gen.sample}")

        run_pool(todo, prepare, cfg, cfg.eval, log, stats, label=f"eval {cfg.run_name}",
                 verbose=cfg.verbose, item_name=lambda item: f"{item[2].parent.name}/{item[2].name}")
    return stats


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = load_cli_config(EvalRunConfig, list(argv or []), USAGE, EXAMPLE, EVAL_ALIASES)
        if cfg is None:  # --help
            return 0
        require(cfg.run_name, "set run_name=NAME: the run folder written by `kbench generate`")
        stats = evaluate_run(cfg)
        counts = ", ".join(f"{s} {n}" for s, n in stats["status_counts"].most_common()) or "nothing new"
        shared = f", {stats['shared_verdicts']} of them copies of a verdict on the same code" \
            if stats.get("shared_verdicts") else ""
        console.print(f"{cfg.run_name}: evaluated {stats['evaluated']} ({counts}{shared}); "
                      f"{stats['skipped']} were already in {RESULTS}")
        for err in stats["harness_errors"][:10]:
            console.print(f"[red]harness error (sample not recorded; rerun to retry): {err}[/]")
        return 1 if stats["harness_errors"] else 0

    return cli_main("eval", body)
