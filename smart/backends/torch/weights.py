"""Weights out of the torch backend: engine sync copies, HF export, checkpoints (with RNG state).

A checkpoint folder holds `state/` (torch.distributed.checkpoint: model, and the optimizer unless
save_optimizer=false; sharded under FSDP), `trainer.pt` (step, LR schedule, what was saved) and one
`rng_rank{r}.pt` per rank (python, numpy, torch and CUDA generator states), so a resumed run draws
the same random numbers an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import json
import random
import warnings
from pathlib import Path

import numpy as np
import torch


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class WeightsMixin:
    """Methods of TorchTrainBackend that read or write its weights; expects model, optimizer, scheduler,
    step, rank, fsdp, cfg and compute_dtype on self."""

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        if not self.fsdp:
            return dict(self.model.state_dict())
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Gathers the shards; with cpu_offload only rank 0 receives the tensors.
        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def state_dict_for_sync(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """HF-named CPU copies of the weights (never views of the live parameters) for the engines.
        On several ranks every rank must call it; rank 0 gets the tensors, the others an empty dict."""
        return {
            k: v.detach().to("cpu", dtype=dtype or v.dtype, copy=True) for k, v in self._full_state_dict().items()
        }

    def export_hf(self, path: str | Path) -> Path:
        """save_pretrained the model (compute dtype) and, where model_path has one, its tokenizer."""
        path = Path(path)
        state = self.state_dict_for_sync(self.compute_dtype)
        if self.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
            self.model.save_pretrained(path, state_dict=state)
            config = json.loads((path / "config.json").read_text())
            config["dtype"] = str(self.compute_dtype).removeprefix("torch.")
            (path / "config.json").write_text(json.dumps(config, indent=2))
            tokenizer = self._tokenizer()
            if tokenizer is not None:
                tokenizer.save_pretrained(path)
        return path

    def _tokenizer(self):
        local = Path(self.cfg.model_path).expanduser()
        if local.is_dir() and not any((local / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
            return None  # weights-only folder (e.g. a test model): nothing to export
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(local) if local.exists() else self.cfg.model_path)

    def save_checkpoint(self, path: str | Path) -> Path:
        """Model (+ optimizer unless save_optimizer=false) + step + LR schedule + every RNG state."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"model": model_sd, **({"optimizer": optim_sd} if self.cfg.save_optimizer else {})}
        with _single_process_dcp():
            dcp.save(state, checkpoint_id=str(path / "state"))
        torch.save(rng_state(), path / f"rng_rank{self.rank}.pt")
        if self.rank == 0:
            meta = {"step": self.step, "scheduler": self.scheduler.state_dict(), "optimizer": self.cfg.save_optimizer}
            torch.save(meta, path / "trainer.pt")
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict, set_state_dict

        path = Path(path)
        if not (path / "trainer.pt").is_file() or not (path / "state").is_dir():
            raise ValueError(f"{path} is not a trainer checkpoint (no trainer.pt and state/); pass a folder written by save_checkpoint")
        meta = torch.load(path / "trainer.pt", weights_only=False)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        with_optimizer = meta.get("optimizer", True)
        state = {"model": model_sd, **({"optimizer": optim_sd} if with_optimizer else {})}
        with _single_process_dcp():
            dcp.load(state, checkpoint_id=str(path / "state"))
        if with_optimizer:
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        else:  # saved with save_optimizer=false: Adam starts afresh
            set_model_state_dict(self.model, state["model"])
            self.optimizer.state.clear()  # get_state_dict filled it with a zero-gradient step
        self.step = int(meta["step"])
        self.scheduler.load_state_dict(meta["scheduler"])
        rng = path / f"rng_rank{self.rank}.pt"
        if rng.is_file():  # checkpoints from before RNG states were saved have none
            set_rng_state(torch.load(rng, weights_only=False))

    def load_optimizer_moments(self, path: str | Path) -> None:
        """Adam's moments (and their step counts) from a trainer checkpoint; the hyperparameters stay this run's."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        path = Path(path)
        if (path / "trainer" / "trainer.pt").is_file():  # a run's checkpoints/step_N: the trainer's part of it
            path = path / "trainer"
        if not (path / "trainer.pt").is_file() or not (path / "state").is_dir():
            raise ValueError(f"train.optimizer_from={path} is not a trainer checkpoint (no trainer.pt and state/); "
                             "pass a checkpoints/step_N folder of the run model_path came from")
        if not torch.load(path / "trainer.pt", weights_only=False).get("optimizer", True):
            raise ValueError(f"train.optimizer_from={path} was saved with save_optimizer=false: it has no Adam "
                             "moments; pass a checkpoint saved with them or leave optimizer_from empty")
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state = {"optimizer": optim_sd}
        with _single_process_dcp():
            dcp.load(state, checkpoint_id=str(path / "state"))
        set_state_dict(self.model, self.optimizer, model_state_dict=model_sd, optim_state_dict=state["optimizer"])
        for group in self.optimizer.param_groups:  # the checkpoint's param groups carry its own lr and betas
            group.update(lr=self.cfg.lr, betas=(self.cfg.adam_beta1, self.cfg.adam_beta2),
                         weight_decay=self.cfg.weight_decay)


@contextlib.contextmanager
def _single_process_dcp():
    # dcp warns that it "assumes a single process" when torch.distributed is off: that is our intent.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield
