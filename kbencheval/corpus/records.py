"""Corpus loaders: GPUMODE/KernelBook, the KernelLLM training corpus, SakanaAI/AI-CUDA-Engineer-Archive.

    records, skipped = load_corpus("kernelbook", "GPUMODE/KernelBook")        # hub id (needs network)
    records, skipped = load_corpus("sakana", "/data/sakana", split="level_1")  # folder of parquet/jsonl

Every row becomes one `CorpusRecord`. A row that cannot be used (no kernel, no PyTorch source) is
not dropped silently: it is returned in `skipped` with its reason, and the commands print the count.

Schemas (column names and types as published; docs/data.md says how each was checked):
- KernelBook (`dataset_permissive.parquet`, split train): python_code, triton_code, entry_point,
  repo_name, module_name, synthetic (bool), licenses (list of str), stars (int), sha, repo_link, uuid.
- KernelLLM: `facebook/KernelLLM` is a model repository, not a dataset; its card names
  GPUMODE/KernelBook as the training data. source=kernelllm therefore reads KernelBook-schema rows
  (a local export of that corpus) and tags them origin=kernelllm; the hub id itself is refused.
- Sakana archive (splits level_1, level_2, level_3): Op_Name, Level_ID, Task_ID, Kernel_Name,
  CUDA_Runtime, PyTorch_Native_Runtime, PyTorch_Compile_Runtime, CUDA_Speedup_Native,
  CUDA_Speedup_Compile, CUDA_Code, PyTorch_Code_Module, PyTorch_Code_Functional, Correct (bool),
  Max_Diff, Error, NCU_Profile, Torch_Profile, Clang_Tidy, __index_level_0__. License CC-BY-4.0.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

SOURCES = ("kernelbook", "kernelllm", "sakana")
HUB_IDS = {"kernelbook": "GPUMODE/KernelBook", "sakana": "SakanaAI/AI-CUDA-Engineer-Archive"}
SAKANA_SPLITS = ("level_1", "level_2", "level_3")
SAKANA_LICENSE = "CC-BY-4.0"

KERNELBOOK_COLUMNS = ("python_code", "triton_code", "entry_point", "repo_name", "module_name", "synthetic",
                      "licenses", "stars", "sha", "repo_link", "uuid")
SAKANA_COLUMNS = ("Op_Name", "Level_ID", "Task_ID", "Kernel_Name", "CUDA_Runtime", "PyTorch_Native_Runtime",
                  "PyTorch_Compile_Runtime", "CUDA_Speedup_Native", "CUDA_Speedup_Compile", "CUDA_Code",
                  "PyTorch_Code_Module", "PyTorch_Code_Functional", "Correct", "Max_Diff", "Error",
                  "NCU_Profile", "Torch_Profile", "Clang_Tidy", "__index_level_0__")


class CorpusError(ValueError):
    """A corpus that cannot be loaded as asked; the message says what to change."""


@dataclasses.dataclass
class CorpusRecord:
    """One (PyTorch program, kernel) pair, whatever corpus it came from."""

    id: str  # stable across reloads: origin + the row's own id
    pytorch_source: str
    kernel_source: str
    backend: str  # triton | cuda
    origin: str  # kernelbook | kernelllm | sakana
    license: str  # SPDX-ish, "" when the row does not say
    entry_point: str = ""  # the PyTorch module's class name
    functional_source: str = ""  # Sakana: the functional PyTorch program the CUDA code binds to
    meta: dict = dataclasses.field(default_factory=dict)  # the row's other columns worth keeping

    @property
    def source_hash(self) -> str:
        return hashlib.sha256((self.pytorch_source + "\0" + self.kernel_source).encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CorpusRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def kernelbook_record(row: dict, index: int, origin: str = "kernelbook") -> tuple[CorpusRecord | None, str]:
    """(record, "") or (None, why the row is unusable)."""
    row_id = f"{origin}:{row.get('uuid', index)}"
    python_code, triton_code = _text(row.get("python_code")), _text(row.get("triton_code"))
    if not triton_code.strip():
        return None, f"{row_id}: no kernel (triton_code is empty)"
    if not python_code.strip():
        return None, f"{row_id}: no PyTorch program (python_code is empty)"
    licenses = row.get("licenses") or []
    if isinstance(licenses, str):
        licenses = [licenses]
    meta = {k: row.get(k) for k in ("repo_name", "module_name", "synthetic", "stars", "sha", "repo_link", "uuid")
            if k in row}
    return CorpusRecord(
        id=row_id, pytorch_source=python_code, kernel_source=triton_code, backend="triton", origin=origin,
        license=",".join(str(x) for x in licenses), entry_point=_text(row.get("entry_point") or row.get("module_name")),
        meta=meta,
    ), ""


def sakana_record(row: dict, index: int) -> tuple[CorpusRecord | None, str]:
    level, task = row.get("Level_ID"), row.get("Task_ID")
    row_id = f"sakana:L{level}_{task}:{row.get('Kernel_Name') or row.get('__index_level_0__', index)}"
    cuda_code = _text(row.get("CUDA_Code"))
    module_code = _text(row.get("PyTorch_Code_Module"))
    if not cuda_code.strip():
        return None, f"{row_id}: no kernel (CUDA_Code is empty)"
    if not module_code.strip():
        return None, f"{row_id}: no PyTorch program (PyTorch_Code_Module is empty)"
    meta = {k: row.get(k) for k in ("Op_Name", "Level_ID", "Task_ID", "Kernel_Name", "Correct", "Max_Diff",
                                    "CUDA_Speedup_Native", "CUDA_Speedup_Compile", "Error", "__index_level_0__")
            if k in row}
    return CorpusRecord(
        id=row_id, pytorch_source=module_code, kernel_source=cuda_code, backend="cuda", origin="sakana",
        license=SAKANA_LICENSE, entry_point="Model", functional_source=_text(row.get("PyTorch_Code_Functional")),
        meta=meta,
    ), ""


def _local_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".parquet", ".jsonl", ".json") and p.is_file())
    if not files:
        raise CorpusError(f"{folder} has no .parquet, .jsonl or .json files; point path= at the downloaded dataset")
    return files


def _read_rows(source: str, path: str, split: str | None):
    """Rows as dicts, from the hub (datasets.load_dataset) or a local folder/file of parquet/jsonl."""
    import datasets  # heavy; only loading needs it

    datasets.disable_progress_bars()

    local = Path(path)
    try:
        if local.exists():
            files = _local_files(local) if local.is_dir() else [local]
            if source == "sakana" and split:  # the archive's files are named after their split
                files = [f for f in files if f.stem.startswith(split)]
                if not files:
                    return None
            kind = "parquet" if files[0].suffix == ".parquet" else "json"
            return datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train")
        if path.count("/") != 1 or path.startswith((".", "/", "~")):
            raise CorpusError(f"corpus path {path} does not exist; give a local folder/file of parquet/jsonl "
                              "or a hub dataset id (owner/name)")
        # KernelBook's repo holds the same rows as .json and .parquet: read only the parquet.
        files = "dataset_permissive.parquet" if path == HUB_IDS["kernelbook"] else None
        return datasets.load_dataset(path, data_files=files, split=split or "train")
    except CorpusError:
        raise
    except Exception as e:  # datasets raises many types; the user needs one line
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise CorpusError(f"cannot load corpus {path} ({source}, split {split or 'train'}): {first}") from None


def _check_columns(columns: list[str], source: str, path: str) -> None:
    need = ("python_code", "triton_code") if source in ("kernelbook", "kernelllm") else ("CUDA_Code", "PyTorch_Code_Module")
    missing = [c for c in need if c not in columns]
    if missing:
        raise CorpusError(f"{path} has no column(s) {missing} for source={source}; its columns are "
                          f"{sorted(columns)[:12]} - pick the matching source (kernelbook, kernelllm, sakana)")


def load_corpus(source: str, path: str = "", *, split: str | None = None,
                limit: int = 0) -> tuple[list[CorpusRecord], list[str]]:
    """(records, skipped reasons). `path` is a hub id or a local folder/file; "" uses the source's hub id."""
    if source not in SOURCES:
        raise CorpusError(f"unknown corpus source '{source}': use one of {', '.join(SOURCES)}")
    if source == "kernelllm" and (not path or path.lower() == "facebook/kernelllm"):
        raise CorpusError("facebook/KernelLLM is a model, not a dataset: its card lists GPUMODE/KernelBook as its "
                          "training data; use source=kernelbook, or source=kernelllm path=<local export of it>")
    path = path or HUB_IDS[source]
    if source == "sakana" and split is not None and split not in SAKANA_SPLITS:
        raise CorpusError(f"the Sakana archive has splits {', '.join(SAKANA_SPLITS)}, not '{split}'")
    splits = [split]
    if source == "sakana" and not split:
        splits = list(SAKANA_SPLITS)
        if Path(path).is_file() or (Path(path).is_dir() and not any(
                f.stem.startswith(SAKANA_SPLITS) for f in _local_files(Path(path)))):
            splits = [None]  # a local copy whose files are not named by split: read it once
    records, skipped = [], []
    for one_split in splits:
        rows = _read_rows(source, path, one_split)
        if rows is None:  # this split has no file in the local copy
            continue
        _check_columns(list(rows.column_names), source, path)
        for i, row in enumerate(rows):
            if limit and len(records) >= limit:
                break
            record, why = sakana_record(row, i) if source == "sakana" else kernelbook_record(row, i, source)
            if record is None:
                skipped.append(why)
            else:
                records.append(record)
    return records, skipped
