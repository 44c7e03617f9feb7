"""`kbench corpus filter`: verified corpus -> an SFT dataset folder that `smart sft` reads directly.

    kbench corpus filter verified=corpus/kernelbook out=data/kb_sft decontam=[bundled,huggingface]
    kbench corpus filter verified=corpus/kb out=data/kb_sft keep_status=[correct] threshold=0.5 ngram_n=8
    smart sft configs/sft_tiny_cpu.yaml data.sft_jsonl=data/kb_sft

Filters, in order (each record is dropped by the first it fails; OUT/dropped.jsonl says which, why,
and for decontamination the matched problem and score):
1. verdict: its verdict's status is in keep_status (default: correct); no verdict = dropped.
2. dedup: the same normalised PyTorch program + kernel (names, literals, comments ignored) as a kept one.
3. decontam: its PyTorch program (or kernel, against bundled reference solutions) matches a problem of
   the `decontam` sets by normalised AST or token n-gram Jaccard >= threshold (kbencheval/corpus/decontam.py).
Output: OUT/train.jsonl ({"messages": [...], "id", "origin", "license", "backend"}: the prompt from
kbencheval.prompts, the record's kernel as the answer), OUT/records.jsonl and OUT/manifest.json.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from pathlib import Path

from kbencheval.bench.common import cli_main, console
from kbencheval.bench.store import read_results, write_json_atomic
from kbencheval.bench.config import load_cli_config
from kbencheval.config import ConfigError
from kbencheval.corpus.convert import to_answer, to_problem
from kbencheval.corpus.decontam import Decontaminator, normalise, reference_problems
from kbencheval.corpus.records import CorpusError, CorpusRecord
from kbencheval.corpus.verify import RECORDS, VERDICTS, read_jsonl, write_jsonl

TRAIN = "train.jsonl"
USAGE = "kbench corpus filter verified=FOLDER out=FOLDER [key=value ...]"
EXAMPLE = "kbench corpus filter verified=corpus/kb out=data/kb_sft decontam=[bundled,huggingface] threshold=0.5"


@dataclasses.dataclass(kw_only=True)
class FilterConfig:
    verified: str = ""
    """Folder written by `kbench corpus verify` (records.jsonl + verdicts.jsonl)."""
    out: str = ""
    """Dataset folder to write; `smart sft data.sft_jsonl=OUT` reads it."""
    keep_status: list[str] = dataclasses.field(default_factory=lambda: ["correct"])
    """Verdict statuses kept, e.g. keep_status=[correct]."""
    dedup: bool = True
    decontam: list[str] = dataclasses.field(default_factory=lambda: ["bundled"])
    """Problem sets to decontaminate against: bundled, local:/path/to/KernelBench, huggingface[:id]; [] = none."""
    ngram_n: int = 8
    threshold: float = 0.5
    """Token n-gram Jaccard at or above which a record counts as a copy of a benchmark problem."""
    prompt_style: str = "zero_shot"
    """kbencheval.prompts style for the user turn: zero_shot | one_shot | few_shot (use what RL uses)."""

    def validate(self) -> None:
        if not 0 < self.threshold <= 1 or self.ngram_n < 2:
            raise ConfigError(f"threshold must be in (0, 1] and ngram_n >= 2, got {self.threshold}, {self.ngram_n}")


def dedup_key(record: CorpusRecord) -> str:
    try:
        text = normalise(record.pytorch_source) + "\0" + normalise(record.kernel_source)
    except CorpusError:  # kernels that are not Python (CUDA) are hashed on whitespace-normalised text
        text = normalise(record.pytorch_source) + "\0" + " ".join(record.kernel_source.split())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def conversation(record: CorpusRecord, prompt_style: str) -> list[dict]:
    from kbencheval.prompts import build_prompt

    messages = build_prompt(to_problem(record).source, backend=record.backend, style=prompt_style)
    return messages + [{"role": "assistant", "content": to_answer(record)}]


def select(records: list[CorpusRecord], verdicts: dict, cfg: FilterConfig) -> tuple[list[CorpusRecord], list[dict]]:
    """(kept, dropped rows) after the verdict, dedup and decontamination filters."""
    checker = Decontaminator(reference_problems(cfg.decontam), ngram_n=cfg.ngram_n,
                             threshold=cfg.threshold) if cfg.decontam else None
    kept, dropped, seen = [], [], {}
    for r in records:
        verdict = verdicts.get((r.id, 0))
        status = verdict.get("status") if verdict else None
        if status not in cfg.keep_status:
            dropped.append({"id": r.id, "filter": "verdict", "reason": f"status {status or 'missing (not verified)'}"
                            + (f": {verdict.get('error', '')[:200]}" if verdict and verdict.get("error") else "")})
            continue
        if cfg.dedup:
            key = dedup_key(r)
            if key in seen:
                dropped.append({"id": r.id, "filter": "dedup", "reason": f"same normalised source as {seen[key]}"})
                continue
            seen[key] = r.id
        if checker is not None:
            match = checker.check(r.pytorch_source) or (checker.check(r.kernel_source) if r.backend == "triton" else None)
            if match is not None:
                dropped.append({"id": r.id, "filter": "decontam", "reason": f"{match.method} overlap with "
                                f"{match.problem_key}", "matched": match.problem_key, "method": match.method,
                                "score": match.score})
                continue
        kept.append(r)
    return kept, dropped


def filter_corpus(cfg: FilterConfig) -> dict:
    if not cfg.verified or not cfg.out:
        raise ConfigError("set verified=FOLDER (from `kbench corpus verify`) and out=FOLDER (the dataset to write)")
    src = Path(cfg.verified)
    records = [CorpusRecord.from_dict(d) for d in read_jsonl(src / RECORDS, "run `kbench corpus verify out=...` first")]
    verdicts, unreadable = read_results(src / VERDICTS)
    if not verdicts:
        raise CorpusError(f"{src / VERDICTS} has no verdicts; run `kbench corpus verify out={src}` first")
    kept, dropped = select(records, verdicts, cfg)
    rows = [{"messages": conversation(r, cfg.prompt_style), "id": r.id, "origin": r.origin, "license": r.license,
             "backend": r.backend} for r in kept]
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / TRAIN, rows)
    write_jsonl(out / RECORDS, [r.to_dict() for r in kept])
    write_jsonl(out / "dropped.jsonl", dropped)
    by_filter = Counter(d["filter"] for d in dropped)
    summary = {"records": len(records), "kept": len(kept), "dropped": dict(by_filter),
               "unreadable_verdict_lines": unreadable, "config": dataclasses.asdict(cfg),
               "decontam_dropped_ids": [d["id"] for d in dropped if d["filter"] == "decontam"]}
    write_json_atomic(out / "manifest.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = load_cli_config(FilterConfig, list(argv or []), USAGE, EXAMPLE)
        if cfg is None:  # --help
            return 0
        s = filter_corpus(cfg)
        drops = ", ".join(f"{k} {v}" for k, v in s["dropped"].items()) or "none"
        console.print(f"filter: kept {s['kept']} of {s['records']} (dropped: {drops}); decontam threshold "
                      f"{cfg.threshold} on {cfg.ngram_n}-grams against {cfg.decontam or 'nothing'} -> {cfg.out}/{TRAIN}")
        if s["decontam_dropped_ids"]:
            console.print(f"decontaminated ids: {', '.join(s['decontam_dropped_ids'][:20])}"
                          f"{' ...' if len(s['decontam_dropped_ids']) > 20 else ''} (all in {cfg.out}/dropped.jsonl)")
        return 0

    return cli_main("corpus filter", body)
