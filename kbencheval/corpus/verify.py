"""`kbench corpus verify`: run every corpus record through the evaluator and keep its verdict.

    kbench corpus verify source=kernelbook path=GPUMODE/KernelBook out=corpus/kernelbook device=cuda
    kbench corpus verify source=sakana path=/data/sakana split=level_1 out=corpus/sakana_l1 limit=500
    kbench corpus verify source=kernelbook path=/data/kb out=/tmp/kb device=cpu cpu_evaluators=2 eval.trials=3

Writes OUT/records.jsonl (the loaded records), OUT/verdicts.jsonl (one EvalResult per record, keyed
by record id; the same append-only, kill-safe log `kbench eval` uses, so a rerun evaluates only
what is missing) and OUT/skipped.jsonl (rows that could not become records, with the reason).
A record that cannot be turned into a problem/candidate gets a format_error verdict saying why.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

from kbencheval.bench.common import cli_main, console
from kbencheval.bench.config import EVAL_ALIASES, EvaluatorPoolConfig, eval_config_field, load_cli_config
from kbencheval.bench.evaluate import EvalJob, run_pool
from kbencheval.bench.store import ResultsLog, write_json_atomic
from kbencheval.config import ConfigError
from kbencheval.corpus.convert import to_answer, to_problem
from kbencheval.corpus.records import SOURCES, CorpusError, CorpusRecord, load_corpus
from kbencheval.eval import EvalConfig
from kbencheval.eval import EvalResult, Status

RECORDS, VERDICTS, SKIPPED = "records.jsonl", "verdicts.jsonl", "skipped.jsonl"
USAGE = "kbench corpus verify source=kernelbook|kernelllm|sakana path=HUB_ID_OR_FOLDER out=FOLDER [key=value ...]"
EXAMPLE = "kbench corpus verify source=kernelbook path=GPUMODE/KernelBook out=corpus/kb device=cuda eval.trials=3"


@dataclasses.dataclass(kw_only=True)
class VerifyConfig(EvaluatorPoolConfig):
    source: str = "kernelbook"
    """kernelbook | kernelllm | sakana"""
    path: str = ""
    """Hub dataset id, or a local folder/file of parquet/jsonl; "" = the source's hub id."""
    split: str = ""
    """Dataset split; "" = train (Sakana: all of level_1, level_2, level_3)."""
    limit: int = 0
    """Read at most this many records; 0 = all."""
    out: str = ""
    """Folder for records.jsonl, verdicts.jsonl and skipped.jsonl; rerun with the same out to resume."""
    verbose: bool = False
    eval: EvalConfig = eval_config_field()
    """The evaluator (kbencheval.eval.trusted.harness.EvalConfig): eval.trials=3 eval.timeout_s=120 ..."""

    def validate(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"source={self.source!r} is not one of {', '.join(SOURCES)}")
        EvaluatorPoolConfig.validate(self)
        if self.limit < 0:
            raise ConfigError(f"limit={self.limit}: set limit >= 0 (0 reads every record)")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Whole-file atomic write (records are rewritten on every run; verdicts are appended, never here)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def read_jsonl(path: Path, what: str) -> list[dict]:
    if not path.is_file():
        raise CorpusError(f"{path} does not exist; {what}")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise CorpusError(f"{path} line {n} is not JSON; rerun the command that wrote it") from None
    return rows


def unique_ids(records: list[CorpusRecord]) -> list[CorpusRecord]:
    """Rows sharing an id (a corpus listing a module twice) get #2, #3, ... so each keeps its verdict."""
    seen: Counter = Counter()
    for r in records:
        seen[r.id] += 1
        if seen[r.id] > 1:
            r.id = f"{r.id}#{seen[r.id]}"
    return records


def prepare_job(record: CorpusRecord) -> EvalJob:
    keys = {"problem_key": record.id, "sample": 0, "origin": record.origin, "backend": record.backend}
    try:
        problem, text = to_problem(record), to_answer(record)
    except CorpusError as e:  # the record cannot be run at all: that is its verdict, with the reason
        preset = EvalResult(status=Status.FORMAT_ERROR, problem=record.id, error=f"conversion: {e}")
        return EvalJob(keys, None, "", record.backend, preset, record.id)
    return EvalJob(keys, problem, text, record.backend, None, record.id)


def verify(cfg: VerifyConfig) -> dict:
    """Load, convert, evaluate what has no verdict yet; returns counts."""
    if not cfg.out:
        raise ConfigError("set out=FOLDER: records.jsonl and verdicts.jsonl are written there")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    records, skipped = load_corpus(cfg.source, cfg.path, split=cfg.split or None, limit=cfg.limit)
    records = unique_ids(records)
    write_jsonl(out / RECORDS, [r.to_dict() for r in records])
    write_jsonl(out / SKIPPED, [{"reason": why} for why in skipped])
    write_json_atomic(out / "verify.json", {"config": dataclasses.asdict(cfg), "records": len(records),
                                            "skipped": len(skipped)})
    if skipped:
        console.print(f"[yellow]skipped {len(skipped)} row(s) that cannot be records (first: {skipped[0]}); "
                      f"all reasons in {out / SKIPPED}[/]")
    if not records:
        raise CorpusError(f"no usable records in {cfg.path or cfg.source}; see {out / SKIPPED}")
    cfg.check_placement()
    stats = {"evaluated": 0, "skipped_rows": len(skipped), "harness_errors": [], "status_counts": Counter()}
    with ResultsLog(out / VERDICTS) as log:
        todo = [r for r in records if (r.id, 0) not in log.done]
        stats["already_done"] = len(records) - len(todo)
        if todo:
            run_pool(todo, prepare_job, cfg, cfg.eval, log, stats, label=f"verify {cfg.source}",
                     verbose=cfg.verbose, item_name=lambda r: r.id)
    return stats


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = load_cli_config(VerifyConfig, list(argv or []), USAGE, EXAMPLE, EVAL_ALIASES)
        if cfg is None:  # --help
            return 0
        stats = verify(cfg)
        counts = ", ".join(f"{s} {n}" for s, n in stats["status_counts"].most_common()) or "nothing new"
        console.print(f"verify: evaluated {stats['evaluated']} ({counts}); {stats['already_done']} already had a "
                      f"verdict; {stats['skipped_rows']} row(s) skipped -> {cfg.out}")
        for err in stats["harness_errors"][:10]:
            console.print(f"[red]harness error (record not recorded; rerun to retry): {err}[/]")
        return 1 if stats["harness_errors"] else 0

    return cli_main("corpus verify", body)
