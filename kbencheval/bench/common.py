"""Pieces the bench commands share: error handling at the CLI edge, device lists, progress bars."""

from __future__ import annotations

import datetime
import sys
from typing import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from kbencheval.config import ConfigError
from kbencheval.dataset import ProblemError

console = Console(stderr=True)  # progress and tables on stderr keep stdout clean for --json
stdout = Console()


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def require(value, message: str) -> None:
    """Required settings are checked after overrides (a config's validate() also runs on its defaults)."""
    if not value:
        raise ConfigError(message)


def make_llm_client(server_type: str, model_name: str, base_url: str = "", api_key_env: str = "",
                    engine_device: str = "auto", engine_dtype: str = "auto"):
    """The client for a generate/run-one config; api_key_env matters only for hosted OpenAI-style APIs
    (openai and KernelBench's presets), engine_device and engine_dtype only for the embedded engine."""
    from kbencheval.llm import base

    kwargs = {"api_key_env": api_key_env} if api_key_env else {}
    if api_key_env and server_type not in ("openai",) + base.PRESET_SERVER_TYPES:
        raise ConfigError(f"api_key_env is for OpenAI-compatible servers; drop it for server_type={server_type}")
    if server_type == "embedded":
        kwargs["device"] = embedded_device(engine_device)
        kwargs["dtype"] = embedded_dtype(engine_dtype)
    else:
        for key, value in (("engine_device", engine_device), ("engine_dtype", engine_dtype)):
            if value != "auto":
                raise ConfigError(f"{key} is for server_type=embedded; drop it for server_type={server_type}")
    return base.make_client(server_type, model_name, base_url=base_url or None, **kwargs)


def embedded_dtype(engine_dtype: str) -> str:
    from kbencheval.llm.embedded import DTYPE_NAMES

    if engine_dtype != "auto" and engine_dtype not in DTYPE_NAMES:
        raise ConfigError(f"engine_dtype={engine_dtype!r}: use auto, {', '.join(DTYPE_NAMES)}")
    return engine_dtype


def embedded_device(engine_device: str) -> str:
    """auto -> cuda when torch sees a GPU, else cpu: the embedded engine's CPU path is orders of magnitude
    slower than its GPU path, even for a tiny model (docs/llm.md)."""
    if engine_device != "auto":
        if not (engine_device in ("cpu", "cuda") or (engine_device.startswith("cuda:") and engine_device[5:].isdigit())):
            raise ConfigError(f"engine_device={engine_device!r}: use auto, cpu, cuda or cuda:N")
        return engine_device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cli_main(command: str, body: Callable[[], int]) -> int:
    """Run a command; config and data errors become one line on stderr and exit code 2."""
    from kbencheval.bench.store import RunError
    from kbencheval.llm.base import LLMError

    try:
        return body()
    except (ConfigError, ProblemError, RunError, LLMError, ValueError) as e:
        print(f"kbench {command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kbench {command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


def resolve_devices(device: str, num_gpus: int = 0, cpu_evaluators: int = 1,
                    evaluators_per_gpu: int = 1) -> list[str]:
    """One entry per evaluator to start. `auto` -> every local GPU (or the CPU); `cuda` -> the first
    num_gpus GPUs (0 = all); `cuda:N` -> one. Each GPU appears `evaluators_per_gpu` times: its evaluators
    overlap compile and correctness and time one at a time (kbencheval/eval/sharing/gate.py)."""
    if evaluators_per_gpu < 1:
        raise ConfigError(f"evaluators_per_gpu={evaluators_per_gpu}: set evaluators_per_gpu >= 1")
    return [d for d in _resolve_devices(device, num_gpus, cpu_evaluators)
            for _ in range(1 if d == "cpu" else evaluators_per_gpu)]


def _resolve_devices(device: str, num_gpus: int, cpu_evaluators: int) -> list[str]:
    if device == "cpu":
        return ["cpu"] * max(1, cpu_evaluators)
    import torch  # only here: `kbench report` and `--help` stay light

    from kbencheval.eval.config import check_device

    count = torch.cuda.device_count()
    if device == "auto":
        if not count:
            return ["cpu"] * max(1, cpu_evaluators)
        device = "cuda"
    if not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ConfigError(f"device={device!r} is not one of auto, cpu, cuda, cuda:N")
    check_device(device)  # the Evaluator's own check, before any Evaluator starts
    if device != "cuda":
        return [device]
    n = num_gpus or count
    if n > count:
        raise ConfigError(f"num_gpus={n} but only {count} GPU(s) are visible; lower num_gpus or set 0 for all")
    return [f"cuda:{i}" for i in range(n)]


class RateColumn(ProgressColumn):
    """Completed items per second since the start (rich's windowed speed skips the warm-up)."""

    def render(self, task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        if not elapsed or not task.completed:
            return Text("-/s", style="progress.data.speed")
        rate = task.completed / elapsed
        return Text(f"{rate:.2f}/s" if rate >= 0.1 else f"{60 * rate:.1f}/min", style="progress.data.speed")


def make_progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def translate_kernelbench_args(argv: list[str], aliases: dict[str, str], ignored: dict[str, str]) -> list[str]:
    """Map KernelBench's argument names onto ours, so commands users already type keep working.

    `aliases` renames keys; `ignored` lists keys that have no meaning here, each with the reason,
    which is printed instead of silently dropping them. Anything else passes through unchanged.
    """
    if any(a in ("-h", "--help") for a in argv):
        print("KernelBench argument names accepted here:")
        for key, ours in aliases.items():
            print(f"  {key} -> {ours}")
        for key, why in ignored.items():
            print(f"  {key}: ignored ({why})")
        print()
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in ignored:
            console.print(f"[yellow]note: ignoring {key}={value}: {ignored[key]}[/]")
            continue
        out.append(f"{aliases[key]}={value}" if sep and key in aliases else arg)
    return out
