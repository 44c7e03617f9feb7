"""The tables beside a report's HTML page: one row per problem or sample, as CSV and (with pyarrow) parquet."""

from __future__ import annotations

from pathlib import Path

SAMPLE_COLUMNS = ("problem_key", "level", "problem_id", "sample", "status", "compiled", "correct", "speedup",
                  "timing_meaningful", "runtime_us", "ref_runtime_us", "device", "error")


def write_tables(stem: Path, tables: dict[str, list[dict]]) -> list[Path]:
    """<stem>_<name>.csv and, where pyarrow is installed (the data or train extra), .parquet for each table
    (one row per dict); returns the paths written."""
    import csv

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:  # the core install: CSV only, and `tables_note` says how to get parquet
        pa = pq = None
    written = []
    for name, rows in tables.items():
        columns = list(dict.fromkeys(k for row in rows for k in row))
        csv_path, pq_path = stem.with_name(f"{stem.name}_{name}.csv"), stem.with_name(f"{stem.name}_{name}.parquet")
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        written.append(csv_path)
        if pq is not None:
            pq.write_table(pa.Table.from_pylist(rows), pq_path)
            written.append(pq_path)
    return written


def tables_note(written: list) -> str:
    """How the tables beside an HTML page were written, for the command's last line."""
    if any(str(p).endswith(".parquet") for p in written):
        return "tables beside it as CSV and parquet"
    return 'tables beside it as CSV (parquet needs pyarrow: pip install "tritonforge[data]")'


def sample_rows(records: list[dict]) -> list[dict]:
    rows = [{c: r.get(c) for c in SAMPLE_COLUMNS} for r in records]
    for row in rows:
        row["error"] = (row["error"] or "")[:300]
    return sorted(rows, key=lambda r: (r["level"] or 0, r["problem_id"] or 0, r["sample"]))
