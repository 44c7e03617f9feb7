"""The FSDP2 data-parallel path on CPU: 2 gloo ranks must match one process.

    pytest tests/smart/test_torch_backend_dist.py

Runs the same code path as several GPUs (fully_shard, token-balanced shards, filler micro-batches,
sharded checkpoints, gathered state dicts) with the gloo backend, so it fits a 2-core CI machine.
"""

import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from smart.backends.torch import TorchTrainBackend, TrainConfig
from tests.smart.test_torch_backend import _samples

ADV = [1.0, -1.0, 0.5, -0.5, 0.2]  # 5 samples on 2 ranks: uneven shards, uneven micro-batch counts


def _cfg(model_path, device="cpu"):
    # fp32 on GPU too, so one process and two ranks can be compared tightly
    return TrainConfig(model_path=model_path, lr=1e-3, micro_batch_tokens=16, device=device, grad_clip=0.0, dtype="fp32")


def _worker(rank, world, port, model_path, out_dir, backend="gloo"):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        b = TorchTrainBackend(_cfg(model_path, device))
        samples = _samples(5)
        logprobs = b.compute_logprobs(samples)
        metrics = b.train_grpo(samples, ADV, logprobs)
        grads = {k: p.grad.full_tensor() for k, p in b.model.named_parameters()}  # collective: all ranks
        synced = b.state_dict_for_sync()
        b.save_checkpoint(os.path.join(out_dir, "ckpt"))
        b.train_sft(samples)  # move away, then come back through the sharded checkpoint
        b.load_checkpoint(os.path.join(out_dir, "ckpt"))
        reloaded = b.state_dict_for_sync()
        b.export_hf(os.path.join(out_dir, "hf"))
        step = b.step
        rl_step = _rl_step(b, samples)  # old logprobs inside (gathered over ranks), two mini-batches, TIS
        if rank == 0:
            torch.save(
                dict(logprobs=logprobs, metrics=metrics, grads=grads, synced=synced, reloaded=reloaded, step=step,
                     rl_step=rl_step),
                os.path.join(out_dir, "rank0.pt"),
            )
    finally:
        dist.destroy_process_group()
    # Past here the rank's work is done: leave without the interpreter's teardown, where gloo's worker threads
    # can still abort the process (pytorch/pytorch#179291 describes the race). A rank aborted once in CI with
    # "terminate called without an active exception", teardown being the likely place; a rank that fails
    # before this point still fails the test.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _rl_step(backend, samples):
    backend.cfg.grpo.num_steps_per_rollout = 2
    backend.cfg.grpo.tis_clip = 1.5
    return backend.train_step(samples, ADV)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, head_dim=16)
    path = tmp_path_factory.mktemp("tiny_qwen3_dist")
    Qwen3ForCausalLM(cfg).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("gloo", marks=pytest.mark.slow),  # two gloo ranks: ~85 s on 2 CPU cores
        pytest.param("nccl", marks=[pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]),
    ],
)
def test_two_fsdp_ranks_match_one_process(model_dir, tmp_path, backend):
    mp.spawn(_worker, args=(2, _free_port(), model_dir, str(tmp_path), backend), nprocs=2, join=True)
    got = torch.load(tmp_path / "rank0.pt", weights_only=False, map_location="cpu")

    single = TorchTrainBackend(_cfg(model_dir, "cuda:0" if backend == "nccl" else "cpu"))
    samples = _samples(5)
    logprobs = single.compute_logprobs(samples)
    metrics = single.train_grpo(samples, ADV, logprobs)

    flat = lambda rows: [x for row in rows for x in row]  # noqa: E731
    assert flat(got["logprobs"]) == pytest.approx(flat(logprobs), abs=1e-5)
    assert got["metrics"]["loss"] == pytest.approx(metrics["loss"], rel=1e-5)
    assert got["metrics"]["pg_loss"] == pytest.approx(metrics["pg_loss"], rel=1e-5)
    assert got["metrics"]["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=1e-4)
    for k, p in single.model.named_parameters():
        torch.testing.assert_close(got["grads"][k], p.grad.cpu(), rtol=1e-4, atol=1e-6)
    # rank 0 receives full, HF-named tensors; the checkpoint restores them exactly
    assert set(got["synced"]) == set(single.model.state_dict())
    for k, v in got["synced"].items():
        assert v.device.type == "cpu" and v.shape == single.model.state_dict()[k].shape
        assert torch.equal(got["reloaded"][k], v)
    assert got["step"] == 1
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert all(torch.equal(exported[k], v) for k, v in got["synced"].items())
    # the GRPO entry: old logprobs computed once inside, two optimizer steps, TIS, mismatch maxima
    want = _rl_step(single, samples)
    assert want["optimizer_steps"] == got["rl_step"]["optimizer_steps"] == 2
    for key in ("loss", "pg_loss", "ratio_mean_last", "clip_frac", "tis_mean", "tis_clip_frac",
                "logprob_mismatch_mean", "logprob_mismatch_max", "grad_norm"):
        assert got["rl_step"][key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
