"""data.sft_dataset: SFT conversations from a save_to_disk folder, parquet files or a hub id, via `datasets`."""

from __future__ import annotations

import pytest

from smart.config import ConfigError, DataConfig, load_config
from smart.rollout.data import load_sft_conversations

datasets = pytest.importorskip("datasets", reason="the train extra is not installed")

CONVS = [
    [{"role": "user", "content": "write relu"}, {"role": "assistant", "content": "```python\nrelu\n```"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "gelu"},
     {"role": "assistant", "content": "```python\ngelu\n```", "name": "kernel-bot"}],
]


def _load(source: str, split: str = "train"):
    return load_sft_conversations(DataConfig(sft_dataset=source, sft_split=split), "triton", "one_shot")


def test_save_to_disk_folder_and_dataset_dict(tmp_path):
    ds = datasets.Dataset.from_list([{"messages": c, "id": i} for i, c in enumerate(CONVS)])
    ds.save_to_disk(str(tmp_path / "one"))
    assert _load(str(tmp_path / "one")) == CONVS  # the key only one message had does not leak into the others
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dict"))
    assert _load(str(tmp_path / "dict"), "test") == CONVS[:1]
    with pytest.raises(ConfigError, match=r"splits \['test', 'train'\], not 'valid': set data.sft_split"):
        _load(str(tmp_path / "dict"), "valid")


def test_parquet_file_and_folder(tmp_path):
    (tmp_path / "pq").mkdir()
    ds = datasets.Dataset.from_list([{"messages": c} for c in CONVS])  # shards of one table share its schema
    for i in range(2):
        ds.select([i]).to_parquet(str(tmp_path / "pq" / f"part-{i}.parquet"))
    assert _load(str(tmp_path / "pq" / "part-0.parquet")) == CONVS[:1]
    assert _load(str(tmp_path / "pq")) == CONVS


def test_errors_name_the_fix(tmp_path):
    datasets.Dataset.from_list([{"text": "x"}]).to_parquet(str(tmp_path / "t.parquet"))
    with pytest.raises(ConfigError, match="no 'messages' column"):
        _load(str(tmp_path / "t.parquet"))
    (tmp_path / "c.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="for JSONL use data.sft_jsonl"):
        _load(str(tmp_path / "c.jsonl"))
    with pytest.raises(ConfigError, match="does not exist; give a hub id"):
        _load(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="set one of data.sft_jsonl and data.sft_dataset"):
        load_config(DataConfig, None, ["sft_jsonl=a.jsonl", "sft_dataset=b"])


def test_hub_id_goes_to_load_dataset(monkeypatch):
    seen = {}

    def fake_load_dataset(source, split):
        seen.update(source=source, split=split)
        return datasets.Dataset.from_list([{"messages": CONVS[0]}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert _load("owner/kernels", "sft") == CONVS[:1] and seen == {"source": "owner/kernels", "split": "sft"}
