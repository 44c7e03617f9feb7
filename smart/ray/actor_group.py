"""The training actor group: data-parallel Ray actors, each wrapping the configured backend.

    group = TrainGroup("torch", train_cfg, placement.actor)
    metrics = group.train_step(samples, normalize_std=True)   # advantages here, old logprobs in the backend

Every rank receives the whole batch (put in the object store once, read by every rank) and takes
its own token-balanced shard (the backend's plan), so loss denominators are global without extra
communication. With several workers the actors form
a torch.distributed group (NCCL on GPU, gloo on CPU) and the backend shards the model with FSDP2.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import ray

from smart.backends import backend_class
from smart.ray.placement import Slot
from smart.rollout.filters import groups_of
from smart.sample import Sample


@ray.remote
class TrainRank:
    def __init__(self, backend: str, cfg: Any, rank: int, world_size: int, master: tuple[str, int] | None):
        if world_size > 1:
            import torch
            import torch.distributed as dist

            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0",
                              MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
        self.backend = backend_class(backend)(cfg)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.backend, method)(*args, **kwargs)

    def weights_version(self) -> int:
        return self.backend.weights_version

    def run(self, fn, *args):
        """fn(backend, *args) in this rank's process: weight senders (smart.rollout.engines.weight_sync)
        keep per-process state, such as a broadcast group, next to the weights."""
        return fn(self.backend, *args)


@ray.remote
def _free_port() -> tuple[str, int]:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


class TrainGroup:
    def __init__(self, backend: str, cfg: Any, slots: list[Slot]):
        n = len(slots)
        # Rank 0's node picks the rendezvous port; a tiny task scheduled on the same bundle finds one.
        master = ray.get(_free_port.options(**{**slots[0].options(), "num_gpus": 0, "num_cpus": 0}).remote()) if n > 1 else None
        self.workers = [TrainRank.options(**slot.options()).remote(backend, cfg, rank, n, master) for rank, slot in enumerate(slots)]
        ray.get([w.weights_version.remote() for w in self.workers])  # surface construction errors here

    @classmethod
    def for_run(cls, cfg, slots: list[Slot]) -> "TrainGroup":
        """The group a run config (RLConfig / SFTConfig) asks for: its `backend`, its `train:` section."""
        rollout = getattr(cfg, "rollout", None)  # RL: the trainer scores tokens at the sampling temperature
        return cls(cfg.backend, train_config_for(cfg.train, cfg.model_path, rollout and rollout.temperature), slots)

    def _all(self, method: str, *args, **kwargs) -> list:
        return ray.get([w.call.remote(method, *args, **kwargs) for w in self.workers])

    def compute_logprobs(self, samples: list[Sample]) -> list[list[float]]:
        return self._all("compute_logprobs", ray.put(samples))[0]

    def train_sft(self, samples: list[Sample]) -> dict[str, float]:
        return self._all("train_sft", ray.put(samples))[0]

    def train_grpo(self, samples: list[Sample], advantages: list[float], old_logprobs: list[list[float]]) -> dict[str, float]:
        return self._all("train_grpo", ray.put(samples), advantages, old_logprobs)[0]

    def train_step(self, samples: list[Sample], normalize_std: bool = True, group_by: str = "trajectory",
                   positive_only: bool = False) -> dict[str, float]:
        """One GRPO step on `samples`: group advantages here, old logprobs and the update inside each rank."""
        advantages = compute_advantages(samples, normalize_std, group_by, positive_only)
        return self._all("train_step", ray.put(samples), advantages)[0]

    def weights_ref(self) -> ray.ObjectRef:
        """Rank 0's full state dict, left in the object store (every rank must join the gather)."""
        refs = [w.call.remote("state_dict_for_sync") for w in self.workers]
        ray.get(refs[1:])
        return refs[0]

    def weights_version(self) -> int:
        return ray.get(self.workers[0].weights_version.remote())

    def run_on_ranks(self, fn, *args) -> list:
        """fn(backend, *args) on every rank at once (collectives need all of them); results by rank."""
        return ray.get([w.run.remote(fn, *args) for w in self.workers])

    def save_checkpoint(self, path: str) -> None:
        self._all("save_checkpoint", path)

    def load_checkpoint(self, path: str) -> None:
        self._all("load_checkpoint", path)

    def export_hf(self, path: str) -> None:
        self._all("export_hf", path)

    def shutdown(self) -> None:
        for w in self.workers:
            ray.kill(w)


def train_config_for(train: Any, model_path: str, temperature: float | None = None) -> Any:
    """The run's model_path (and, for RL, rollout.temperature) are the one source of truth; the
    backend section may leave them unset."""
    train = dataclasses.replace(train, model_path=model_path)
    if temperature is not None and hasattr(train, "grpo"):
        train.grpo = dataclasses.replace(train.grpo, temperature=temperature)
    return train


def compute_advantages(samples: list[Sample], normalize_std: bool, group_by: str = "trajectory",
                       positive_only: bool = False) -> list[float]:
    """GRPO advantages within each group (rollout.group_by: all turns of a prompt, or one turn index)."""
    import torch

    from smart.algo import group_advantages

    unrewarded = [s.index for s in samples if s.reward is None]
    if unrewarded:
        raise ValueError(f"samples {unrewarded[:8]} have no reward: GRPO needs rewarded samples, e.g. from "
                         "RolloutManager.rollout (generate + reward), not RolloutManager.generate alone")
    adv_by_sample: dict[int, float] = {}
    for group in groups_of(samples, group_by).values():
        rewards = torch.tensor([float(s.reward) for s in group])
        for s, a in zip(group, group_advantages(rewards, len(group), normalize_std, positive_only=positive_only).tolist()):
            adv_by_sample[id(s)] = a
    return [adv_by_sample[id(s)] for s in samples]
