"""tracking.wandb=true: an offline W&B run beside TensorBoard, with the same metric names and values."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kbencheval.eval import EvalResult, Status
from smart.config import TrackingConfig
from smart.reward.metrics import rollout_metrics
from smart.sample import Sample
from smart.tracking import PhaseTimer, Tracker, read_scalars

pytest.importorskip("wandb", reason="the wandb extra is not installed")


def read_wandb_history(run_file: Path) -> dict[str, dict[int, float]]:
    """History rows of an offline run's .wandb file: W&B writes LevelDB's log format (32 KiB blocks of
    crc32/length/type-framed chunks) after a 7-byte ':W&B' header, each record one wandb Record proto."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            break
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            records.append(Record.FromString(pending))
            pending = b""
    history: dict[str, dict[int, float]] = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            step = int(items.pop("_step"))
            for key, value in items.items():
                if not key.startswith("_"):
                    history.setdefault(key, {})[step] = value
    return history


def _samples() -> list[Sample]:
    """Two turns, one candidate rejected (the cheat rate), one correct with a speedup."""
    verdicts = [EvalResult(status=Status.CORRECT, compiled=True, correct=True, speedup=1.5),
                EvalResult(status=Status.REJECTED, compiled=True),
                EvalResult(status=Status.INCORRECT, compiled=True),
                EvalResult(status=Status.CORRECT, compiled=True, correct=True, speedup=0.8)]
    return [Sample(index=i, prompt="p", response_text="r", turn=i % 2, reward=float(i), loss_mask=[1] * (i + 1),
                   eval_result=v) for i, v in enumerate(verdicts)]


def test_wandb_offline_run_has_tensorboards_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    tracker = Tracker(out, 3, "rl", every_step=True, tracking=TrackingConfig(wandb=True, wandb_mode="offline"),
                      config={"lr": 1e-5})
    for step in range(3):
        timer = PhaseTimer()
        with timer("rollout"):
            pass
        tracker.log(step, {**rollout_metrics(_samples()), "train/loss": 1.0 / (step + 1), **timer.metrics(),
                           "note": "not a scalar"})
    tracker.close()

    tb = read_scalars(out / "tb")
    runs = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, runs
    wb = read_wandb_history(runs[0])
    assert set(wb) == set(tb)
    for name in ("eval/rejected_rate", "turn0/correct_rate", "turn1/rejected_rate", "time/rollout", "time/step",
                 "train/loss"):
        assert name in wb, name
    for key in tb:
        assert wb[key] == pytest.approx(tb[key], rel=1e-6), key
    assert wb["eval/rejected_rate"][0] == 0.25 and wb["train/loss"] == {0: 1.0, 1: 0.5, 2: pytest.approx(1 / 3)}

    # a resumed run continues the same W&B run (its id kept in OUT/wandb_run_id)
    tracker = Tracker(out, 4, "rl", tracking=TrackingConfig(wandb=True, wandb_mode="offline"))
    tracker.log(3, {"train/loss": 0.25})
    tracker.close()
    ids = {p.name.rsplit("-", 1)[-1] for p in (out / "wandb").glob("offline-run-*")}
    assert ids == {(out / "wandb_run_id").read_text()}


def test_tracking_off_writes_no_wandb(tmp_path):
    tracker = Tracker(tmp_path, 1, "sft")
    tracker.log(0, {"train/loss": 1.0})
    tracker.close()
    assert not (tmp_path / "wandb").exists() and read_scalars(tmp_path / "tb") == {"train/loss": {0: 1.0}}
