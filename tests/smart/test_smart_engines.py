"""The engine boundary: `sync_weights` packs once, pushes to every engine, checks versions, releases old
weights; engine kinds are looked up by name.   pytest tests/smart/test_smart_engines.py (local Ray, 2 CPUs)"""

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from kbencheval.config import ConfigError  # noqa: E402
from smart.rollout.engines import engine_kind, sync_weights  # noqa: E402
from smart.rollout.engines.sglang import DiskWeights  # noqa: E402


@ray.remote(num_cpus=0)
class FakeEngine:
    def __init__(self, lag: int = 0):
        self.version, self.lag, self.received = 0, lag, None

    def push(self, weights, version):
        self.received, self.version = weights, version - self.lag
        return self.version

    def got(self):
        return self.received


@ray.remote(num_cpus=0)
class FakeManager:
    def __init__(self, engines, folder):
        self.engines, self.folder, self.recorded = engines, folder, None

    def weight_targets(self):
        return DiskWeights(self.folder), self.engines

    def record_weights_version(self, version, packed=None):
        self.recorded, self.packed = version, packed

    def recorded_packed(self):
        return self.packed

    def recorded_version(self):
        return self.recorded


class FakeTrainer:
    exports = 0

    def weights_version(self):
        return 3

    def export_hf(self, path):
        FakeTrainer.exports += 1
        Path(path).mkdir(parents=True)
        (Path(path) / "config.json").write_text("{}")


def test_sync_packs_once_pushes_everywhere_and_releases_old_weights(local_ray, tmp_path):
    (tmp_path / "v000001").mkdir()
    engines = [FakeEngine.remote(), FakeEngine.remote()]
    manager = FakeManager.remote(engines, str(tmp_path))
    FakeTrainer.exports = 0
    assert sync_weights(FakeTrainer(), manager) == 3
    assert FakeTrainer.exports == 1  # packed once for all engines
    assert ray.get([e.got.remote() for e in engines]) == [str((tmp_path / "v000003").resolve())] * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000003"]
    assert ray.get(manager.recorded_version.remote()) == 3  # later samples carry the new version
    # ...and the manager keeps what was pushed, for an engine restarted later
    assert ray.get(manager.recorded_packed.remote()) == [str((tmp_path / "v000003").resolve())]


def test_an_engine_that_misses_the_version_stops_the_sync(local_ray, tmp_path):
    manager = FakeManager.remote([FakeEngine.remote(), FakeEngine.remote(lag=1)], str(tmp_path))
    with pytest.raises(RuntimeError, match=r"engines report weights versions \[3, 2\] after syncing version 3"):
        sync_weights(FakeTrainer(), manager)
    assert ray.get(manager.recorded_version.remote()) is None


def test_engine_kinds_by_name():
    assert engine_kind("embedded").needs_slots and not engine_kind("sglang").needs_slots
    assert engine_kind("embedded").on_dead == "restart" and engine_kind("sglang").on_dead == "drop"
    with pytest.raises(ConfigError, match="choose one of embedded, sglang"):
        engine_kind("vllm")


@pytest.mark.parametrize("train_dtype, engine_dtype, expected", [
    ("auto", "auto", "auto"), ("bf16", "auto", "auto"), ("fp32", "auto", "float32"), ("fp32", "bfloat16", "bfloat16"),
])
def test_embedded_engines_follow_an_fp32_trainer(train_dtype, engine_dtype, expected):
    # a bf16 engine rounds away updates below one bf16 step, so an fp32 trainer's engines sample in fp32
    from smart.config import RLConfig, from_dict
    from smart.rollout.engines.embedded import engine_dtype as resolve

    cfg = from_dict(RLConfig, {"model_path": "m", "train": {"dtype": train_dtype},
                               "rollout": {"engine_dtype": engine_dtype}}, "rl")
    assert resolve(cfg) == expected


def test_engine_dtype_is_checked():
    from smart.config import RLConfig, from_dict

    with pytest.raises(ConfigError, match="engine_dtype='fp64'"):
        from_dict(RLConfig, {"model_path": "m", "rollout": {"engine_dtype": "fp64"}}, "rl")
    with pytest.raises(ConfigError, match="SGLang server takes --dtype"):
        from_dict(RLConfig, {"model_path": "m", "rollout": {"engine_dtype": "float32", "engine": "sglang",
                                                             "sglang_urls": ["http://x:1"]}}, "rl")


def test_embedded_engines_start_with_the_configured_batch_and_dtype(monkeypatch):
    # a step's 512 samples decode in one pass only when the engine takes them together
    import argparse

    from smart.config import RLConfig, from_dict
    from smart.rollout.engines import embedded

    started = []

    class FakeActor:
        @staticmethod
        def options(**options):
            return argparse.Namespace(remote=lambda *args: started.append(args))

    class FakeSlot:
        def options(self):
            return {}

    monkeypatch.setattr(embedded, "EmbeddedEngineActor", FakeActor)
    cfg = from_dict(RLConfig, {"model_path": "m", "train": {"dtype": "fp32"},
                               "rollout": {"engine_max_batch": 512}, "cluster": {"gpus_per_bundle": 0}}, "rl")
    embedded.KIND.start(cfg, [FakeSlot()])
    assert started == [("m", "cpu", "float32", 512)]
    with pytest.raises(ConfigError, match="engine_max_batch must be >= 1"):
        from_dict(RLConfig, {"model_path": "m", "rollout": {"engine_max_batch": 0}}, "rl")
