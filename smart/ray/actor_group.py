"""The training actor group: data-parallel Ray actors, each wrapping a TorchTrainBackend.

    group = TrainGroup(train_cfg, placement.actor)
    metrics = group.train_grpo(samples, advantages, old_logprobs)   # every rank gets the full batch

Every rank receives the whole batch and takes its own token-balanced shard (the backend's plan),
so loss denominators are global without extra communication. With several workers the actors form
a torch.distributed group (NCCL on GPU, gloo on CPU) and the backend shards the model with FSDP2.
"""

from __future__ import annotations

import dataclasses
import os

import ray

from smart.backends.torch import TorchTrainBackend, TrainConfig
from smart.ray.placement import Slot
from smart.sample import Sample


@ray.remote
class TrainWorker:
    def __init__(self, cfg: TrainConfig, rank: int, world_size: int, master: tuple[str, int] | None):
        if world_size > 1:
            import torch
            import torch.distributed as dist

            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0",
                              MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
        self.backend = TorchTrainBackend(cfg)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.backend, method)(*args, **kwargs)

    def weights_version(self) -> int:
        return self.backend.weights_version


@ray.remote
def _free_port() -> tuple[str, int]:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


class TrainGroup:
    def __init__(self, cfg: TrainConfig, slots: list[Slot]):
        n = len(slots)
        # Rank 0's node picks the rendezvous port; a tiny task scheduled on the same bundle finds one.
        master = ray.get(_free_port.options(**{**slots[0].options(), "num_gpus": 0, "num_cpus": 0}).remote()) if n > 1 else None
        self.workers = [TrainWorker.options(**slot.options()).remote(cfg, rank, n, master) for rank, slot in enumerate(slots)]
        ray.get([w.weights_version.remote() for w in self.workers])  # surface construction errors here

    def _all(self, method: str, *args, **kwargs) -> list:
        return ray.get([w.call.remote(method, *args, **kwargs) for w in self.workers])

    def compute_logprobs(self, samples: list[Sample]) -> list[list[float]]:
        return self._all("compute_logprobs", samples)[0]

    def train_sft(self, samples: list[Sample]) -> dict[str, float]:
        return self._all("train_sft", samples)[0]

    def train_grpo(self, samples: list[Sample], advantages: list[float], old_logprobs: list[list[float]]) -> dict[str, float]:
        return self._all("train_grpo", samples, advantages, old_logprobs)[0]

    def weights_ref(self) -> ray.ObjectRef:
        """Rank 0's full state dict, left in the object store (every rank must join the gather)."""
        refs = [w.call.remote("state_dict_for_sync") for w in self.workers]
        ray.get(refs[1:])
        return refs[0]

    def weights_version(self) -> int:
        return ray.get(self.workers[0].weights_version.remote())

    def save_checkpoint(self, path: str) -> None:
        self._all("save_checkpoint", path)

    def load_checkpoint(self, path: str) -> None:
        self._all("load_checkpoint", path)

    def export_hf(self, path: str) -> None:
        self._all("export_hf", path)

    def shutdown(self) -> None:
        for w in self.workers:
            ray.kill(w)


def train_config_for(train: TrainConfig, model_path: str) -> TrainConfig:
    """The run's model_path is the one source of truth; the backend section may leave it empty."""
    return dataclasses.replace(train, model_path=model_path)
