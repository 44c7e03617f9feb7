"""Run bookkeeping shared by `smart sft` and `smart rl`: Ray start-up, TensorBoard (+ W&B) + rich console,
phase timers, saved rollouts (JSONL of Sample dicts) and checkpoints that a run resumes from.

Run folder:  OUT/tb/ (TensorBoard)  OUT/wandb/ (tracking.wandb=true)  OUT/rollouts/step_00000.jsonl
             OUT/checkpoints/step_00001/  OUT/hf/
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path

from smart.config import ClusterConfig, ConfigError, TrackingConfig
from smart.sample import Sample

REPO_ROOT = Path(__file__).resolve().parents[1]
_STARTED = time.monotonic()  # imported as a run starts: progress lines count from here


def ray_worker_env() -> dict:
    """Environment of Ray's workers: this checkout first, then the caller's PYTHONPATH. Replacing the
    latter hangs every actor where Ray itself comes from PYTHONPATH (the GPU machine's wheels): the
    worker processes cannot import ray, and Ray retries them forever."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])),
            "TOKENIZERS_PARALLELISM": "false",
            # transformers draws a bar for every weight load (trainer, engines): noise in a run's log
            "HF_HUB_DISABLE_PROGRESS_BARS": os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "1")}


def init_ray(cfg: ClusterConfig) -> bool:
    """Start (or join) Ray unless the caller already did; returns True when we started it."""
    import ray

    if ray.is_initialized():
        return False
    env = ray_worker_env()
    if cfg.ray_address:
        from kbencheval.bench.config import require_ray_head

        require_ray_head(cfg.ray_address, "cluster.ray_address")
        ray.init(address=cfg.ray_address, runtime_env={"env_vars": env}, log_to_driver=True)
    else:
        ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=True)
    return True


def seed_everything(seed: int) -> None:
    """Python, NumPy and torch RNGs of this process (actors seed their own from the config)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def progress(title: str, message: str) -> None:
    """One start-up line ("rl: Ray up [6 s]"), so a run is never silent while it starts."""
    print(f"{title}: {message} [{time.monotonic() - _STARTED:.0f} s]", flush=True)


def finished_step(out_dir: Path, num_steps: int, export_hf: bool) -> int | None:
    """The step a finished run in out_dir reached (its checkpoint at or past num_steps, its export written),
    or None when there is something left to do."""
    ckpt = latest_checkpoint(out_dir)
    done = read_run_state(ckpt)["next_step"]
    if not ckpt or done < num_steps or (export_hf and not (out_dir / "hf" / "config.json").exists()):
        return None
    return done


def finished_message(out_dir: str, done: int, num_steps: int) -> str:
    return (f"{out_dir} already finished at step {done}/{num_steps}; nothing to train. "
            f"Use a new out_dir=... or raise num_steps")


def done_message(title: str, out_dir: str) -> str:
    """The last line of a run: where everything went (relative paths are the caller's)."""
    return f"{title} done: {os.path.abspath(out_dir)} (checkpoints/, hf/, tb/ for TensorBoard)"


class PhaseTimer:
    """`with timer("train"): ...` accumulates wall seconds per phase, reported as time/<phase>."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}": v for k, v in self.seconds.items()} | {"time/step": sum(self.seconds.values())}


class Tracker:
    """TensorBoard scalars for every numeric metric (and W&B, under the same names, with tracking.wandb),
    and one rich console line per step."""

    SHOWN = ("reward/mean", "eval/compile_rate", "eval/correct_rate", "train/loss", "train/grad_norm",
             "filter/dropped_groups", "time/step")

    def __init__(self, out_dir: Path, total_steps: int, title: str, every_step: bool = False,
                 tracking: TrackingConfig | None = None, config: dict | None = None, start_step: int = 0):
        from rich.console import Console
        from torch.utils.tensorboard import SummaryWriter

        from kbencheval.progress import progress_bar

        self.writer = SummaryWriter(str(out_dir / "tb"))
        self.wandb_run = start_wandb(out_dir, title, tracking, config) if tracking and tracking.wandb else None
        self.console = Console(highlight=False, soft_wrap=True)  # one line per step, also in a log file
        self.total, self.title = total_steps, title
        self.every = 1 if every_step else max(1, total_steps // 20)  # else about 20 console lines per run
        # steps/min and the ETA under the step lines, on a terminal only
        self._bar = contextlib.ExitStack()
        self._advance = self._bar.enter_context(progress_bar(total_steps, f"{title} steps", " steps",
                                                             completed=start_step, console=self.console))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(scalars, step=step)
        self._advance(1)
        if (step + 1) % self.every and step + 1 != self.total:  # TensorBoard gets every step
            return
        label = {"reward/mean": "reward", "time/step": "sec"}
        shown = "  ".join(f"{label.get(k, k.split('/')[-1])}={metrics[k]:.3g}" for k in self.SHOWN if k in metrics)
        self.console.print(f"[bold cyan]{self.title}[/] step [bold]{step + 1}/{self.total}[/]  {shown}")

    def close(self) -> None:
        self._bar.close()
        self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()


def start_wandb(out_dir: Path, title: str, tracking: TrackingConfig, config: dict | None):
    """A W&B run writing under OUT/wandb/; its id is kept in OUT/wandb_run_id so a resumed run continues it."""
    import wandb

    out_dir.mkdir(parents=True, exist_ok=True)
    id_file = out_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
    id_file.write_text(run_id)
    return wandb.init(project=tracking.wandb_project, name=f"{title}:{out_dir.name}", id=run_id, resume="allow",
                      dir=str(out_dir), config=config, job_type=title, mode=tracking.wandb_mode or None)


def save_rollouts(path: Path, samples: list[Sample]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(s.to_json() + "\n" for s in samples))
    tmp.replace(path)


def load_rollouts(path: Path) -> list[Sample]:
    return [Sample.from_json(line) for line in path.read_text().splitlines() if line.strip()]


def replay_file(replay_dir: str, step: int) -> Path:
    """Saved rollouts for `step`, cycling when the run has more steps than files."""
    files = sorted(Path(replay_dir).glob("step_*.jsonl"))
    if not files:
        raise ConfigError(f"replay_dir={replay_dir} holds no step_*.jsonl files; point it at a run's rollouts/ folder")
    return files[step % len(files)]


def latest_checkpoint(out_dir: Path) -> Path | None:
    """Newest checkpoint whose run_state.json was written (it is written last, so the folder is whole)."""
    done = sorted((out_dir / "checkpoints").glob("step_*/run_state.json"))
    return done[-1].parent if done else None


def save_checkpoint(out_dir: Path, step: int, trainer, run_state: dict, keep_last_n: int = 0) -> Path:
    """Write checkpoints/step_{step+1}; then delete all but the newest keep_last_n whole ones (0 keeps all)."""
    path = out_dir / "checkpoints" / f"step_{step + 1:06d}"
    trainer.save_checkpoint(str(path / "trainer"))
    tmp = path / "run_state.json.tmp"
    tmp.write_text(json.dumps({"next_step": step + 1, **run_state}, indent=2))
    tmp.replace(path / "run_state.json")
    if keep_last_n:
        # Only whole checkpoints count (run_state.json is written last); a torn one is left for inspection.
        whole = sorted(p.parent for p in (out_dir / "checkpoints").glob("step_*/run_state.json"))
        for old in whole[:-keep_last_n]:
            shutil.rmtree(old, ignore_errors=True)
    return path


def export_policy(out_dir: Path, step: int, trainer) -> Path:
    """The policy after step+1 steps as a HF folder, out_dir/hf_steps/step_{step+1}: written under a temporary
    name, then renamed, so an evaluation beside the run never reads half a folder."""
    path = out_dir / "hf_steps" / f"step_{step + 1:06d}"
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.export_hf(str(tmp))
    shutil.rmtree(path, ignore_errors=True)
    tmp.replace(path)
    return path


def read_run_state(ckpt: Path | None) -> dict:
    return json.loads((ckpt / "run_state.json").read_text()) if ckpt else {"next_step": 0}


def read_scalars(tb_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar tag a run logged under tb_dir -> {step: value}. Every events file is read, in order:
    a resumed run appends a new one, and its steps overwrite the interrupted run's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values: dict[str, dict[int, float]] = {}
    for events in sorted(Path(tb_dir).glob("events.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            values.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return values
