"""Evaluate every generation of a run on all local GPUs (or the CPU); resumable and kill-safe.

    kbench eval run_name=qwen_l1                     # every visible GPU, else the CPU interpreter
    kbench eval run_name=qwen_l1 device=cuda num_gpus=4 timeout_s=300
    kbench eval run_name=tiny device=cpu cpu_workers=2

One Evaluator per device; worker threads pull the next (problem, sample) from one shared queue, so
no GPU waits on another's slow sample. Each result is appended to runs/<name>/results.jsonl the
moment it exists; a rerun skips exactly the (problem, sample) pairs already there.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections import Counter
from pathlib import Path

from kbencheval.bench.common import cli_main, console, make_progress, require, resolve_devices
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
from kbencheval.config import ConfigError, load_config
from kbencheval.dataset import Problem, load_problems
from kbencheval.eval.result import EvalResult, Status


@dataclasses.dataclass
class EvalRunConfig:
    run_name: str = ""
    runs_dir: str = "runs"
    device: str = "auto"
    """auto (all GPUs, else CPU) | cpu | cuda | cuda:N"""
    num_gpus: int = 0
    """With device=cuda/auto: how many GPUs to use; 0 = all visible."""
    cpu_workers: int = 1
    """With the CPU: evaluators running side by side."""
    backend: str = ""
    """Kernel language; empty = the one the run was generated for."""
    trials: int = 0
    """Correctness trials (fresh seeded inputs each); 0 = the harness default."""
    timeout_s: float = 0.0
    """Per-sample limit in seconds; 0 = the harness default."""
    verbose: bool = False
    """Print every verdict as it arrives."""

    def validate(self) -> None:
        if self.num_gpus < 0 or self.cpu_workers < 1:
            raise ConfigError("num_gpus must be >= 0 and cpu_workers >= 1")


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


def evaluate_run(cfg: EvalRunConfig) -> dict:
    """Evaluate what is missing; returns {"evaluated", "skipped", "harness_errors", "status_counts"}."""
    from kbencheval.eval.harness import EvalConfig, Evaluator

    run = run_dir(cfg.runs_dir, cfg.run_name)
    manifest = read_json(run / MANIFEST)
    backend = cfg.backend or manifest.get("backend", "triton")
    problems = run_problems(run, manifest)
    devices = resolve_devices(cfg.device, cfg.num_gpus, cfg.cpu_workers)
    eval_overrides = {k: v for k, v in (("trials", cfg.trials), ("timeout_s", cfg.timeout_s)) if v}

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
        work: queue.Queue = queue.Queue()
        for item in todo:
            work.put(item)
        stop = threading.Event()
        mutex = threading.Lock()

        with make_progress() as progress:
            task = progress.add_task(f"eval {cfg.run_name} on {', '.join(sorted(set(devices)))}", total=len(todo))

            def worker(device: str) -> None:
                try:
                    with Evaluator(EvalConfig(device=device, **eval_overrides)) as evaluator:
                        while not stop.is_set():
                            try:
                                key, sample, path = work.get_nowait()
                            except queue.Empty:
                                return
                            evaluate_one(evaluator, problems[key], path, backend, device)
                except Exception as e:  # the Evaluator itself failed to start on this device
                    with mutex:
                        stats["harness_errors"].append(f"{device}: evaluator failed: {e}")

            def evaluate_one(evaluator, problem: Problem, path: Path, backend: str, device: str) -> None:
                try:
                    gen = Generation.from_dict(read_json(path))
                    if gen.error:  # the request failed: nothing to run
                        result = EvalResult(status=Status.FORMAT_ERROR, problem=problem.key,
                                            error=f"generation failed: {gen.error}", device=device)
                    else:
                        result = evaluator.evaluate(problem, gen.text, backend=backend)
                except Exception as e:  # a harness bug or unreadable file, not a verdict: a rerun retries it
                    with mutex:
                        stats["harness_errors"].append(f"{path.parent.name}/{path.name}: {type(e).__name__}: {e}")
                    progress.advance(task)
                    return
                log.append(make_record(gen, result))
                with mutex:
                    stats["evaluated"] += 1
                    stats["status_counts"][result.status.value] += 1
                    tally = " ".join(f"{s}={n}" for s, n in stats["status_counts"].most_common(3))
                progress.update(task, advance=1, description=f"eval {cfg.run_name} [{tally}]")
                if cfg.verbose:
                    speed = f" speedup {result.speedup:.2f}x" if result.timing_meaningful and result.speedup else ""
                    progress.console.print(f"{gen.problem_key} #{gen.sample}: {result.status.value}{speed}"
                                           f"{' - ' + result.error[:120] if result.error else ''}")

            threads = [threading.Thread(target=worker, args=(d,), name=f"eval-{d}", daemon=True) for d in devices]
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(timeout=0.5)
            except KeyboardInterrupt:
                stop.set()  # workers finish their current sample; everything written so far is kept
                raise
    return stats


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = load_config(EvalRunConfig, None, argv or [])
        require(cfg.run_name, "set run_name=NAME: the run folder written by `kbench generate`")
        stats = evaluate_run(cfg)
        counts = ", ".join(f"{s} {n}" for s, n in stats["status_counts"].most_common()) or "nothing new"
        console.print(f"{cfg.run_name}: evaluated {stats['evaluated']} ({counts}); "
                      f"{stats['skipped']} were already in {RESULTS}")
        for err in stats["harness_errors"][:10]:
            console.print(f"[red]harness error (sample not recorded; rerun to retry): {err}[/]")
        return 1 if stats["harness_errors"] else 0

    return cli_main("eval", body)
