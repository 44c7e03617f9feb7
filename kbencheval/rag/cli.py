"""`kbench rag build`: embed a corpus folder into a retrieval index for RA-ICL prompts.

    kbench rag build corpus=data/kb_sft out=indexes/kb                      # default model BAAI/bge-code-v1
    kbench rag build corpus=corpus/sakana out=indexes/sakana model=/models/bge-code-v1 device=cuda
    kbench rag query index=indexes/kb problem=kbencheval/problems/level1/1_ReLU.py k=3

`corpus` is a folder with records.jsonl: the output of `kbench corpus filter` (verified, deduplicated
and decontaminated: recommended) or of `kbench corpus verify` (every loaded record).
Then: kbench generate / run-one ... prompt_style=raicl raicl_index=OUT raicl_k=2
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from kbencheval.bench.common import cli_main, console
from kbencheval.bench.config import load_cli_config
from kbencheval.config import ConfigError
from kbencheval.corpus.records import CorpusRecord
from kbencheval.corpus.verify import RECORDS, read_jsonl


BUILD_USAGE = "kbench rag build corpus=FOLDER out=FOLDER [model=HUB_ID_OR_FOLDER] [key=value ...]"
BUILD_EXAMPLE = "kbench rag build corpus=data/kb_sft out=indexes/kb model=BAAI/bge-code-v1 device=cuda"
QUERY_USAGE = "kbench rag query index=FOLDER problem=PROBLEM.py [k=2] [key=value ...]"
QUERY_EXAMPLE = "kbench rag query index=indexes/kb problem=kbencheval/problems/level1/6_Softmax.py k=3"


@dataclasses.dataclass(kw_only=True)
class BuildConfig:
    corpus: str = ""
    """Folder with records.jsonl (from `kbench corpus filter` or `verify`)."""
    out: str = ""
    """Index folder to write."""
    model: str = "BAAI/bge-code-v1"
    """sentence-transformers model: hub id or local folder."""
    device: str = "cpu"
    batch_size: int = 32
    trust_remote_code: bool = False
    """Let the embedding model run its own code from the hub (some code embedders need it)."""


@dataclasses.dataclass(kw_only=True)
class QueryConfig:
    index: str = ""
    problem: str = ""
    """A KernelBench problem file to find examples for."""
    k: int = 2
    model: str = ""
    """Expected embedding model; "" = the index's own."""
    backend: str = ""


def build(cfg: BuildConfig) -> dict:
    from kbencheval.rag.index import build_index

    if not cfg.corpus or not cfg.out:
        raise ConfigError("set corpus=FOLDER (with records.jsonl) and out=FOLDER (the index to write)")
    rows = read_jsonl(Path(cfg.corpus) / RECORDS, "run `kbench corpus filter` (or verify) to make it")
    return build_index([CorpusRecord.from_dict(r) for r in rows], cfg.out, model=cfg.model, device=cfg.device,
                       batch_size=cfg.batch_size, trust_remote_code=cfg.trust_remote_code)


def query(cfg: QueryConfig) -> list:
    from kbencheval.dataset import load_problem_file
    from kbencheval.rag.index import Retriever

    if not cfg.index or not cfg.problem:
        raise ConfigError("set index=FOLDER and problem=PROBLEM.py")
    problem = load_problem_file(cfg.problem)
    return Retriever.load(cfg.index, model=cfg.model).search(problem.source, cfg.k, backend=cfg.backend or None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n")
        load_cli_config(BuildConfig, ["--help"], BUILD_USAGE, BUILD_EXAMPLE)
        print()
        load_cli_config(QueryConfig, ["--help"], QUERY_USAGE, QUERY_EXAMPLE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "build":
        def body() -> int:
            cfg = load_cli_config(BuildConfig, rest, BUILD_USAGE, BUILD_EXAMPLE)
            if cfg is None:  # --help
                return 0
            meta = build(cfg)
            console.print(f"rag build: {meta['count']} examples ({meta['skipped']} skipped) embedded with "
                          f"{meta['model']} (dim {meta['dim']}) in {meta['build_s']:.1f} s -> {cfg.out}")
            return 0
        return cli_main("rag build", body)
    if command == "query":
        def body() -> int:
            cfg = load_cli_config(QueryConfig, rest, QUERY_USAGE, QUERY_EXAMPLE)
            if cfg is None:  # --help
                return 0
            for e in query(cfg):
                print(f"{e.score:.3f}  {e.id}  ({e.origin}, {e.backend}, license {e.license or '?'})")
            return 0
        return cli_main("rag query", body)
    print(f"kbench rag: unknown command '{command}'; choose build or query", file=sys.stderr)
    return 2
