"""The --device cuda modes of benchmarks/weight_sync.py and benchmarks/async_step_time.py, wired up on CPU:
the configs they build put trainer and engine on one GPU (Ray is told it has one; nothing touches CUDA),
and without a GPU they stop at once with the fix.   pytest tests/smart/test_benchmark_devices.py"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import async_step_time  # noqa: E402
import weight_sync  # noqa: E402

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")


@pytest.fixture(scope="module")
def one_gpu_ray():
    """A local Ray that believes it has one GPU: placement can be checked without one."""
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def async_cfg(device: str):
    from smart.config import RLConfig, load_config

    args = argparse.Namespace(device=device, steps=6, prompts=4, group=8, max_new_tokens=256, set=[])
    return load_config(RLConfig, REPO / "configs" / "rl_tiny_cpu.yaml", async_step_time.overrides(args, "m", Path("o")))


def test_async_cuda_colocates_trainer_and_engine_on_one_gpu(one_gpu_ray, monkeypatch):
    from smart.ray.placement import make_placement
    from smart.rollout.engines import embedded

    cfg = async_cfg("cuda")
    cluster, train = cfg.cluster, cfg.train
    assert (cluster.gpus_per_bundle, cluster.colocate, train.dtype, train.device) == (1, True, "bf16", "auto")
    assert cfg.reward.eval.device == "cpu" and cfg.rollout.n_samples_per_prompt == 8
    placement = make_placement(cfg.cluster)
    [actor], [engine_slot] = placement.actor, placement.rollout
    assert actor.bundle == engine_slot.bundle and actor.num_gpus == engine_slot.num_gpus == 0.5  # one GPU, shared

    started = []

    class FakeEngine:  # records how the embedded engine would be started
        @staticmethod
        def options(**options):
            return argparse.Namespace(remote=lambda *args: started.append((options, args)))

    monkeypatch.setattr(embedded, "EmbeddedEngineActor", FakeEngine)
    embedded.KIND.start(cfg, placement.rollout)
    [(options, args)] = started
    assert options["num_gpus"] == 0.5 and args == ("m", "cuda", "auto", 128)  # dtype auto: bf16 on cuda
    ray.util.remove_placement_group(placement.pg)


def test_async_cpu_pins_the_trainer_to_the_cpu():
    cfg = async_cfg("cpu")
    assert (cfg.cluster.gpus_per_bundle, cfg.train.device) == (0, "cpu")


def test_weight_sync_cuda_gives_the_trainer_the_gpu_and_gloo_to_the_group(one_gpu_ray):
    from smart.ray.placement import make_placement

    args = argparse.Namespace(device="cuda", bucket_mb=512.0, server_gpu=-1)
    cfg, group_backend = weight_sync.run_config(args, "m", "o")
    assert (cfg.cluster.gpus_per_bundle, cfg.train.device, group_backend) == (1, "auto", "gloo")
    # a server on a GPU of its own: NCCL (the library's choice) between two GPUs
    assert weight_sync.run_config(argparse.Namespace(device="cuda", bucket_mb=512.0, server_gpu=1), "m", "o")[1] == ""
    placement = make_placement(cfg.cluster, need_rollout=False)
    assert [s.num_gpus for s in placement.actor] == [1]
    ray.util.remove_placement_group(placement.pg)
    cfg, group_backend = weight_sync.run_config(argparse.Namespace(device="cpu", bucket_mb=512.0, server_gpu=-1), "m", "o")
    assert (cfg.cluster.gpus_per_bundle, cfg.train.device, group_backend) == (0, "cpu", "")


@no_gpu
@pytest.mark.parametrize("main", [weight_sync.main, async_step_time.main], ids=["weight_sync", "async_step_time"])
def test_cuda_without_a_gpu_stops_before_any_work(main, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--device", "cuda"])
    assert exit_.value.code == 2 and "torch sees no GPU" in capsys.readouterr().err


@no_gpu
def test_kbench_server_passes_the_device(tiny_model):
    from tests.support import kbench_server

    with pytest.raises(RuntimeError, match="device=cuda but torch sees no GPU"):
        with kbench_server(tiny_model, device="cuda", visible_gpus="0"):
            pass
