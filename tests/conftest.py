import os

import pytest

from tests.support import build_tiny_model


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU (marked gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _quiet_env():
    # Keep tokenizers from forking thread pools inside sandboxed workers.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """One tiny random Qwen3 + locally trained tokenizer for the whole session (~5 s to build)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for one test module; its workers import this checkout."""
    ray = pytest.importorskip("ray")
    from smart.tracking import ray_worker_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": ray_worker_env()})
    yield
    ray.shutdown()


# The GPU test modules' evaluators (one per module): static checks on, and off for attacks that must be
# caught by the run-time and device-side defences alone.
@pytest.fixture(scope="module")
def gpu_eval():
    from kbencheval.eval import EvalConfig, Evaluator

    with Evaluator(EvalConfig(device="cuda", iters=20, timeout_s=120)) as ev:
        yield ev


@pytest.fixture(scope="module")
def gpu_runtime_only():
    from kbencheval.eval import EvalConfig, Evaluator

    with Evaluator(EvalConfig(device="cuda", iters=20, timeout_s=120, static_checks=False)) as ev:
        yield ev
