"""Config pieces the bench commands share, so `kbench run-one`, `generate`, `eval` and smart's reward
speak one vocabulary.

    DatasetConfig   dataset_src, dataset_path, level            (KernelBench's flat keys)
    ClientConfig    server_type, model_name, base_url, api_key_env, temperature, top_p, max_tokens, seed
    EvaluatorPoolConfig device, num_gpus, cpu_evaluators, evaluators_per_gpu, placement, ray_address (where evaluators run)
    eval: EvalConfig  the evaluator's full config, nested:      eval.timing_mode=cuda_graph eval.sandbox=bwrap

The flat keys stay top-level (KernelBench users type `level=1 server_type=openai`); evaluator keys
are nested under `eval.` and the old flat ones (`trials=`, `timeout_s=`) are aliases of them.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from kbencheval.config import ConfigError, config_help, load_config, set_elsewhere, wants_help

T = TypeVar("T")

# Flat keys KernelBench-style commands accept, and the nested EvalConfig key each one sets.
EVAL_ALIASES = {"trials": "eval.trials", "timeout_s": "eval.timeout_s", "timing_mode": "eval.timing_mode",
                "baseline": "eval.baseline", "sandbox": "eval.sandbox", "iters": "eval.iters"}


@dataclasses.dataclass(kw_only=True)
class DatasetConfig:
    dataset_src: str = "bundled"
    """bundled | local | huggingface"""
    dataset_path: str = ""
    """KernelBench folder (local) or dataset id (huggingface; default ScalingIntelligence/KernelBench)."""
    level: int = 1

    def validate(self) -> None:
        if self.dataset_src not in ("bundled", "local", "huggingface"):
            raise ConfigError(f"dataset_src={self.dataset_src!r}: choose bundled, local or huggingface")


@dataclasses.dataclass(kw_only=True)
class EvaluatorPoolConfig:
    device: str = "auto"
    """auto (every GPU, else the CPU interpreter) | cpu | cuda | cuda:N: where the evaluators run."""
    num_gpus: int = 0
    """With device=cuda/auto: how many GPUs to use; 0 = all visible."""
    cpu_evaluators: int = 1
    """With the CPU: evaluators running side by side."""
    evaluators_per_gpu: int = 1
    """Evaluators per GPU: compile and correctness overlap, timing stays one at a time (the device
    gate). 1 keeps other candidates' GPU work out of a timing entirely; see docs/evaluator.md."""

    RENAMED = {"cpu_workers": "cpu_evaluators", "workers_per_gpu": "evaluators_per_gpu"}
    placement: str = "local"
    """local (threads of this process, on this machine's devices) | ray (Ray actors on any node of the
    cluster at ray_address: device=cpu puts cpu_evaluators actors, device=cuda one per GPU x evaluators_per_gpu)."""
    ray_address: str = ""
    """placement=ray: the cluster to join ("auto", "HOST:6379"); empty starts a Ray on this machine."""
    dedupe: bool = False
    """The same code for the same problem judged once, each sample getting a copy of the verdict (as RL rewards
    are). Off: every sample is judged on its own, as a benchmark's samples should be."""

    def validate(self) -> None:
        if self.num_gpus < 0 or self.cpu_evaluators < 1 or self.evaluators_per_gpu < 1:
            raise ConfigError(f"num_gpus={self.num_gpus}, cpu_evaluators={self.cpu_evaluators}, evaluators_per_gpu="
                              f"{self.evaluators_per_gpu}: set num_gpus >= 0, cpu_evaluators >= 1, "
                              "evaluators_per_gpu >= 1")
        if self.placement not in ("local", "ray"):
            raise ConfigError(f"placement={self.placement!r}: choose local or ray")
        if self.placement == "ray" and self.device not in ("cpu", "cuda"):
            raise ConfigError(f"placement=ray with device={self.device!r}: set device=cpu or device=cuda "
                              "(Ray picks the GPU of each worker)")

    def devices(self) -> list[str]:
        """One entry per local evaluator to start (kbencheval.bench.common.resolve_devices)."""
        from kbencheval.bench.common import resolve_devices

        return resolve_devices(self.device, self.num_gpus, self.cpu_evaluators, self.evaluators_per_gpu)

    def check_placement(self) -> None:
        """Fails now, before any work, on a device this machine cannot use or a Ray cluster that is not there."""
        if self.placement == "local":
            self.devices()
        else:
            self._join_ray()

    def describe(self) -> str:
        if self.placement == "ray":
            return f"Ray ({self.device}, {self.ray_address or 'local'})"
        return ", ".join(sorted(set(self.devices())))

    def start_pool(self, eval_cfg):
        """An EvaluatorPool placed as configured."""
        from kbencheval.eval.pool import EvaluatorPool

        if self.placement == "local":
            return EvaluatorPool(eval_cfg, self.devices(), dedupe=self.dedupe)
        devices, options = self._ray_layout()
        return EvaluatorPool(eval_cfg, devices, placement="ray", ray_options=options, dedupe=self.dedupe)

    def _ray_layout(self) -> tuple[list[str], list[dict]]:
        """One actor per evaluator, spread over the cluster's nodes."""
        import ray

        self._join_ray()
        if self.device == "cpu":
            spread = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}
            return ["cpu"] * self.cpu_evaluators, [spread] * self.cpu_evaluators
        gpus = self.num_gpus or int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise ConfigError("placement=ray device=cuda: the Ray cluster has no GPU; set device=cpu or add GPU nodes")
        count = gpus * self.evaluators_per_gpu
        return ["cuda"] * count, [{"num_gpus": 1 / self.evaluators_per_gpu, "scheduling_strategy": "SPREAD"}] * count

    def _join_ray(self) -> None:
        """Joins the cluster at ray_address (or starts a Ray here) unless this process already has one."""
        import ray

        if ray.is_initialized():
            return
        require_ray_head(self.ray_address)
        try:
            ray.init(address=self.ray_address or None, include_dashboard=False, log_to_driver=False)
        except ConnectionError as e:
            raise ConfigError(f"ray_address={self.ray_address!r}: no Ray cluster answered ({e}); start one "
                              "with `ray start --head` or leave ray_address empty") from None


def require_ray_head(address: str, key: str = "ray_address") -> None:
    """Ray waits minutes on an address where nothing answers; a HOST:PORT is tried here first."""
    import socket

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "" (a new local Ray) or "auto" (the cluster this machine knows): Ray says at once
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ConfigError(f"{key}={address}: no Ray head answers there ({e.strerror or e}); start one with "
                          "`ray start --head --port=PORT` or fix the address") from None


@dataclasses.dataclass(kw_only=True)
class ClientConfig:
    server_type: str = "openai"
    """openai | sglang | embedded, or a KernelBench preset: together | deepseek | fireworks | anthropic |
    google | local (OpenAI-compatible, key from $TOGETHER_API_KEY, $DEEPSEEK_API_KEY, ...)"""
    model_name: str = ""
    """The served model id (or a local HF folder / hub id for server_type=embedded)."""
    base_url: str = ""
    api_key_env: str = ""
    """Environment variable holding the API key (openai and the presets); default OPENAI_API_KEY or the preset's."""
    engine_device: str = "auto"
    """server_type=embedded: where the model runs: auto (the first GPU when torch sees one, else cpu), cpu,
    cuda or cuda:N."""
    engine_dtype: str = "auto"
    """server_type=embedded: the weights' dtype: auto (bf16 on a GPU, fp32 on the CPU), float32, bfloat16,
    float16. Evaluate a model in the dtype it was trained in: updates smaller than a bf16 step vanish in bf16."""
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 4096
    seed: int = 0
    """Sample k uses seed + k."""


def eval_config_field():
    """`eval: EvalConfig` with the evaluator's defaults. Its device is set per evaluator from the command's
    `device=`, so `eval.device` is not a key of its own (not in --help; setting it names `device`)."""
    from kbencheval.eval import EvalConfig

    return dataclasses.field(default_factory=EvalConfig, metadata=set_elsewhere(device="device"))


def load_cli_config(cls: type[T], argv: list[str], usage: str, example: str,
                    aliases: dict[str, str] | None = None) -> T | None:
    """key=value argv -> validated config, after renaming `aliases`. `--help` prints every key with its
    type and default, and one example, then returns None (the command exits 0)."""
    aliases = aliases or {}
    if wants_help(argv):
        print(config_help(cls, usage, example, aliases))
        return None
    renamed = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        renamed.append(f"{aliases[key]}={value}" if sep and key in aliases else arg)
    return load_config(cls, None, renamed)

