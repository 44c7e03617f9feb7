"""RA-ICL retrieval: embed a corpus's PyTorch programs into a FAISS index; fetch the nearest solved examples.

    meta = build_index(records, "indexes/kb", model="BAAI/bge-code-v1")
    retriever = Retriever.load("indexes/kb", model="BAAI/bge-code-v1")   # another model -> RagError
    examples = retriever.search(problem.source, k=2, backend="triton")    # [(problem_source, answer_code)]

An index folder holds index.faiss (inner product over L2-normalised embeddings, i.e. cosine),
entries.jsonl (per vector: record id, origin, license, backend, the example's problem source in
KernelBench form and its answer) and meta.json (embedding model, dimension, count, build time).
A search never returns the query problem itself nor anything that overlaps it by the corpus
decontamination test (normalised AST or token n-grams, kbencheval/corpus/decontam.py): an example
that is the problem in disguise would hand the model its answer.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from kbencheval.corpus.convert import to_candidate_code, to_problem
from kbencheval.corpus.decontam import Decontaminator
from kbencheval.corpus.records import CorpusError, CorpusRecord

DEFAULT_MODEL = "BAAI/bge-code-v1"  # as in kernel-rl's RA-ICL
INDEX, ENTRIES, META = "index.faiss", "entries.jsonl", "meta.json"


class RagError(ValueError):
    """An index or embedding model that cannot be used as asked; the message says what to change."""


@dataclasses.dataclass
class Example:
    id: str
    problem_source: str
    answer: str  # the kernel's code, defining ModelNew
    backend: str
    origin: str
    license: str
    score: float = 0.0


def model_id(model: str) -> str:
    """What meta.json records: a local folder as its absolute path (so ./m and /abs/m agree), else the hub id."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def load_embedder(model: str, device: str = "cpu", trust_remote_code: bool = False):
    """A sentence-transformers model from a hub id or a local folder, or one RagError line."""
    from sentence_transformers import SentenceTransformer  # heavy, optional: only RA-ICL needs it

    if model.startswith(("/", ".", "~")) and not Path(model).expanduser().is_dir():
        raise RagError(f"embedding model folder {model} does not exist; pass a sentence-transformers folder or hub id")
    try:
        return SentenceTransformer(model, device=device, trust_remote_code=trust_remote_code)
    except Exception as e:  # hub/network/format errors come in many types
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise RagError(f"cannot load embedding model {model}: {first}") from None


def embed(embedder, texts: list[str], batch_size: int = 32, description: str = ""):
    """Unit-norm float32 rows; with a description, a progress bar (on a terminal) per chunk of batches."""
    import numpy as np

    from kbencheval.progress import progress_bar

    def encode(part: list[str]):
        return embedder.encode(part, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)

    if not description or len(texts) <= batch_size:
        vectors = encode(texts)
    else:
        chunk, parts = batch_size * 8, []
        with progress_bar(len(texts), description, unit=" texts") as advance:
            for i in range(0, len(texts), chunk):
                parts.append(encode(texts[i:i + chunk]))
                advance(len(texts[i:i + chunk]))
        vectors = np.concatenate(parts)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def build_index(records: list[CorpusRecord], out: str | Path, *, model: str = DEFAULT_MODEL, device: str = "cpu",
                batch_size: int = 32, trust_remote_code: bool = False) -> dict:
    """Embed each record's PyTorch program; write the index folder; returns its meta (skips counted there)."""
    import faiss

    entries, skipped = [], []
    for r in records:
        try:
            entries.append(Example(r.id, to_problem(r).source, to_candidate_code(r), r.backend, r.origin, r.license))
        except CorpusError as e:  # cannot be shown as an example; counted, never silent
            skipped.append(str(e))
    if not entries:
        raise RagError(f"no record could become an example ({len(skipped)} skipped; first: "
                       f"{skipped[0] if skipped else 'the corpus is empty'})")
    t0 = time.perf_counter()
    embedder = load_embedder(model, device, trust_remote_code)
    t_load = time.perf_counter() - t0
    vectors = embed(embedder, [e.problem_source for e in entries], batch_size, description="embed corpus")
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    seconds = time.perf_counter() - t0
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(out / INDEX))
    (out / ENTRIES).write_text("".join(json.dumps(dataclasses.asdict(e)) + "\n" for e in entries))
    meta = {"model": model_id(model), "dim": int(vectors.shape[1]), "count": len(entries), "skipped": len(skipped),
            "skipped_reasons": skipped[:50], "backends": sorted({e.backend for e in entries}),
            "model_load_s": round(t_load, 3), "build_s": round(seconds, 3), "device": device,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / META).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


class Retriever:
    def __init__(self, folder: Path, index, entries: list[Example], meta: dict, embedder, *,
                 ngram_n: int = 8, threshold: float = 0.5):
        self.folder, self.index, self.entries, self.meta, self.embedder = folder, index, entries, meta, embedder
        # The corpus is the reference set here, so its own boilerplate windows are discounted.
        self.decontam = Decontaminator([(str(i), e.problem_source) for i, e in enumerate(entries)],
                                       ngram_n=ngram_n, threshold=threshold)

    @classmethod
    def load(cls, folder: str | Path, *, model: str = "", device: str = "cpu", trust_remote_code: bool = False,
             ngram_n: int = 8, threshold: float = 0.5) -> "Retriever":
        """Open an index; `model` (if given) must be the one it was built with."""
        import faiss

        folder = Path(folder)
        if not (folder / META).is_file() or not (folder / INDEX).is_file():
            raise RagError(f"{folder} is not a retrieval index (no {META}/{INDEX}); build one with `kbench rag build`")
        meta = json.loads((folder / META).read_text())
        if model and model_id(model) != meta["model"]:
            raise RagError(f"index {folder} was built with embedding model {meta['model']}, not {model}; "
                           f"rebuild it with model={model} or ask for {meta['model']}")
        entries = [Example(**json.loads(line)) for line in (folder / ENTRIES).read_text().splitlines() if line.strip()]
        index = faiss.read_index(str(folder / INDEX))
        embedder = load_embedder(meta["model"], device, trust_remote_code)
        dim = embedder.get_embedding_dimension() if hasattr(embedder, "get_embedding_dimension") \
            else embedder.get_sentence_embedding_dimension()
        if dim != meta["dim"] or index.ntotal != len(entries):
            raise RagError(f"index {folder} is inconsistent (model dim {dim} vs {meta['dim']}, "
                           f"{index.ntotal} vectors vs {len(entries)} entries); rebuild it")
        return cls(folder, index, entries, meta, embedder, ngram_n=ngram_n, threshold=threshold)

    def search(self, problem_source: str, k: int = 2, *, backend: str | None = None,
               exclude_ids: tuple[str, ...] = ()) -> list[Example]:
        """The k nearest examples of `backend` (None: any) that neither are nor overlap the problem."""
        if k <= 0:
            return []
        query = embed(self.embedder, [problem_source])
        overlapping = {self.entries[int(m.problem_key)].id for m in self.decontam.matches(problem_source)}
        found: list[Example] = []
        want = min(len(self.entries), 4 * k)
        while True:
            scores, ids = self.index.search(query, want)
            found = []
            for score, i in zip(scores[0], ids[0]):
                if i < 0:
                    continue
                e = self.entries[int(i)]
                if e.id in overlapping or e.id in exclude_ids or (backend and e.backend != backend):
                    continue
                found.append(dataclasses.replace(e, score=float(score)))
                if len(found) == k:
                    return found
            if want >= len(self.entries):
                return found
            want = min(len(self.entries), want * 4)
