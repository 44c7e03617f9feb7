"""Run configs for `smart sft` and `smart rl`: typed dataclasses read from YAML plus key=value overrides.

    cfg = load_config(RLConfig, "configs/rl_tiny_cpu.yaml", ["rollout.max_turns=2", "num_steps=4"])

One config system for both packages (kbencheval.config): unknown keys are errors naming the closest
key, and each section's `validate()` names the setting to change. The trainer's own knobs (lr, loss
terms, micro-batching) live in the backend's `TrainConfig`, nested here as `train:`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Literal

from kbencheval.config import ConfigError, from_dict, load_config, section_chosen_by  # noqa: F401  (re-exported)
from kbencheval.eval import EvalConfig
from kbencheval.llm.base import resolve_model_path
from smart.backends import BACKENDS, backend_config_class


@dataclasses.dataclass(kw_only=True)
class ClusterConfig:
    """Where the actors run. With 0 GPUs everything is CPU bundles, so the same code runs on a laptop."""

    ray_address: str = ""
    """"" starts a local Ray; "auto" joins a running cluster."""
    num_cpus: int = 2
    """CPUs a local Ray may use (ignored when joining a cluster)."""
    colocate: bool = True
    """True: each training rank shares its bundle (GPU) with one engine. False: separate bundles."""
    actor_ranks: int = 1
    """Data-parallel training ranks of the policy being trained (one per GPU on a GPU node)."""
    gpus_per_bundle: int = 0
    """GPUs in each placement-group bundle (a training rank's, an engine's): 0 runs training and rollout on CPU."""
    rollout_num_engines: int = 1
    """Engines in the rollout manager; colocated runs need one per training rank at most."""
    RENAMED = {"actor_num_workers": "actor_ranks", "num_gpus_per_worker": "gpus_per_bundle"}
    cpus_per_bundle: float = 0.5
    """CPU share reserved per placement-group bundle; small so a 2-core machine fits actor + engine."""

    def validate(self) -> None:
        if self.actor_ranks < 1 or self.rollout_num_engines < 1:
            raise ConfigError("cluster.actor_ranks and cluster.rollout_num_engines must be >= 1")
        if self.colocate and self.rollout_num_engines > self.actor_ranks:
            raise ConfigError(
                f"colocate=true puts one engine on each training rank's bundle: set cluster.rollout_num_engines "
                f"<= cluster.actor_ranks ({self.actor_ranks}) or colocate=false"
            )
        if self.gpus_per_bundle not in (0, 1):
            raise ConfigError("cluster.gpus_per_bundle must be 0 (CPU) or 1 (one GPU per bundle)")
        if self.cpus_per_bundle <= 0:
            raise ConfigError("cluster.cpus_per_bundle must be > 0 (Ray bundles cannot be empty)")


@dataclasses.dataclass(kw_only=True)
class TrackingConfig:
    """Where step metrics go besides OUT/tb (TensorBoard, always) and the console."""

    wandb: bool = False
    """Also log to Weights & Biases, under the TensorBoard names (needs the `wandb` extra); the run's
    files go to OUT/wandb/, and a resumed run continues the same W&B run."""
    wandb_project: str = "tritonforge"
    wandb_mode: Literal["", "online", "offline"] = ""
    """"" leaves it to WANDB_MODE / `wandb login`; offline writes the run locally (`wandb sync` uploads it)."""


@dataclasses.dataclass(kw_only=True)
class DataConfig:
    """Problems for RL (and, for SFT, where the conversations come from)."""

    source: Literal["bundled", "local", "huggingface"] = "bundled"
    levels: list[int] = dataclasses.field(default_factory=lambda: [1])
    path: str = ""
    """KernelBench folder (source=local) or dataset id (source=huggingface)."""
    heldout_fraction: float = 0.2
    """Share of problems kept out of training for eval; at least one problem always stays in training."""
    problems: list[str] = dataclasses.field(default_factory=list)
    """Restrict to these problem keys (e.g. L1_1_ReLU); empty keeps all."""
    split_seed: int = 0
    sft_jsonl: str = ""
    """SFT only: JSONL of {"messages": [...]} conversations, or a `kbench corpus filter` folder (its
    train.jsonl); "" uses the problems' reference solutions."""
    sft_dataset: str = ""
    """SFT only, instead of sft_jsonl: a Hugging Face dataset with a `messages` column: a hub id
    (owner/name), a `save_to_disk` folder, or a parquet file or folder of them (needs the `train` extra)."""
    sft_split: str = "train"
    """The split of sft_dataset to train on (a hub dataset or a saved DatasetDict)."""

    def validate(self) -> None:
        if not 0 <= self.heldout_fraction < 1:
            raise ConfigError(f"data.heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        if self.sft_jsonl and self.sft_dataset:
            raise ConfigError("set one of data.sft_jsonl and data.sft_dataset, not both")


@dataclasses.dataclass(kw_only=True)
class RolloutConfig:
    RENAMED = {"backend": "kernel_language"}  # "backend" is the training backend only
    prompts_per_step: int = 2
    """Problems per RL step; each becomes one GRPO group."""
    n_samples_per_prompt: int = 4
    """Group size G."""
    temperature: float = 1.0
    """The trainer scores tokens at the same temperature (train.grpo.temperature follows it)."""
    top_p: float = 1.0
    """< 1 only for rollout_only runs: training on top-p samples would be off-policy (refused)."""
    max_new_tokens: int = 256
    kernel_language: str = "triton"
    """triton | cuda: asked for in the prompt and checked by the evaluator (kbencheval's backend=)."""
    prompt_style: str = "one_shot"
    """zero_shot | one_shot | few_shot | raicl (examples retrieved from raicl_index)."""
    raicl_index: str = ""
    """prompt_style=raicl: index folder from `kbench rag build`."""
    raicl_k: int = 2
    raicl_model: str = ""
    """prompt_style=raicl: embedding model the index must have been built with; "" = the index's own."""
    max_turns: int = 1
    """1 = single-turn. >1 = Kevin-style: the evaluator's feedback becomes the next user turn."""
    gamma: float = 0.4
    """Discount for multi-turn returns R_t = r_t + gamma * R_{t+1}."""
    stop_speedup: float = 1.0
    """Multi-turn stops early once a kernel is correct and at least this fast (correct is enough when
    the device gives no timing, as the CPU interpreter does)."""
    generate_fn: str = ""
    """Dotted path `module:function` or `module.function`; "" picks single/multi-turn from max_turns.
    Signature: generate_fn(ctx: RolloutContext, samples: list[Sample]) -> list[Sample]."""
    filter_fn: str = "smart.rollout.filters:keep_varied_rewards"
    """Group filter, filter_fn(group: list[Sample]) -> bool (keep); "" keeps every group."""
    refill_max_rounds: int = 0
    """Extra rollout rounds per step that replace groups filter_fn dropped, each drawing as many new
    prompts as groups are missing (SLIME's over-sampling); 0 = a step trains on what survived."""
    group_by: Literal["trajectory", "turn"] = "trajectory"
    """Multi-turn GRPO groups: all turns of a prompt's trajectories together, or one group per turn index."""
    overlong: Literal["none", "mask", "penalty"] = "none"
    """Truncated replies (hit max_new_tokens): trained as they are, masked out of the loss, or DAPO's
    soft length penalty (arXiv 2503.14476) added to the turn reward."""
    overlong_buffer: int = 0
    """penalty: replies longer than max_new_tokens - overlong_buffer lose up to overlong_penalty, linearly."""
    overlong_penalty: float = 1.0
    engine: Literal["embedded", "sglang"] = "embedded"
    """embedded: transformers engines as Ray actors (weights via the object store). sglang: running
    SGLang servers, one per engine (weights via a save_pretrained folder under out_dir)."""
    sglang_urls: list[str] = dataclasses.field(default_factory=list)
    """engine=sglang: one base URL per engine (cluster.rollout_num_engines), e.g. http://10.0.0.2:30000."""
    sglang_timeout_s: float = 600.0
    """engine=sglang: per HTTP request (a generation or a weight load)."""
    router: Literal["", "sglang"] = ""
    """engine=sglang: "" sends generation straight to each of sglang_urls; "sglang" sends it through
    sglang-router in front of them (weight loads still go to each server directly)."""
    router_url: str = ""
    """router=sglang: a running sglang-router to register sglang_urls with; "" starts one for the run."""
    router_policy: Literal["round_robin", "cache_aware", "random", "power_of_two"] = "round_robin"
    """router=sglang, router started by the run: how it spreads requests over the servers."""
    sglang_weight_sync: Literal["disk", "tensor", "distributed"] = "disk"
    """engine=sglang: weights reach the servers as a folder, serialized tensors over HTTP, or a rank-0 broadcast."""
    weight_bucket_mb: float = 512.0
    """sglang_weight_sync=tensor|distributed: most megabytes of weights per HTTP request / broadcast bucket."""
    engine_dtype: str = "auto"
    """engine=embedded: the engines' weights dtype: auto (the trainer's: fp32 when train.dtype=fp32, else bf16 on
    a GPU and fp32 on the CPU), float32, bfloat16, float16. Weight updates smaller than one step of the engine's
    dtype do not reach the samples."""
    engine_max_batch: int = 128
    """engine=embedded: most sequences one engine decodes together; a step's larger batch is decoded in turns."""
    health_timeout_s: float = 10.0
    """Between steps each engine must answer a ping within this (0 = no check): a dead embedded engine is
    restarted with the current weights, a dead SGLang server is dropped (and removed from the router)."""
    max_engine_restarts: int = 3
    """Restarts of dead embedded engines per run; past it a dead engine is dropped like a dead server."""

    def validate(self) -> None:
        dtypes = ("auto", "float32", "bfloat16", "float16")
        if self.engine_dtype not in dtypes:
            raise ConfigError(f"rollout.engine_dtype={self.engine_dtype!r}: use one of {', '.join(dtypes)}")
        if self.engine_max_batch < 1:
            raise ConfigError(f"rollout.engine_max_batch must be >= 1, got {self.engine_max_batch}")
        if self.engine_dtype != "auto" and self.engine != "embedded":
            raise ConfigError("rollout.engine_dtype sets the embedded engines' dtype; an SGLang server takes --dtype "
                              "at launch: drop rollout.engine_dtype")
        if self.engine == "sglang" and not self.sglang_urls:
            raise ConfigError("rollout.engine=sglang needs rollout.sglang_urls=[http://HOST:PORT, ...] (one per engine)")
        if self.sglang_timeout_s <= 0:
            raise ConfigError("rollout.sglang_timeout_s must be > 0")
        if self.sglang_weight_sync != "disk" and self.engine != "sglang":
            raise ConfigError(f"rollout.sglang_weight_sync={self.sglang_weight_sync} syncs SGLang servers: set "
                              "rollout.engine=sglang or rollout.sglang_weight_sync=disk")
        if self.weight_bucket_mb <= 0:
            raise ConfigError(f"rollout.weight_bucket_mb must be > 0, got {self.weight_bucket_mb}")
        if self.router and self.engine != "sglang":
            raise ConfigError(f"rollout.router={self.router} routes SGLang servers: set rollout.engine=sglang or rollout.router=''")
        if self.router_url and not self.router:
            raise ConfigError("rollout.router_url is only used with rollout.router=sglang: set it, or clear rollout.router_url")
        if self.health_timeout_s < 0 or self.max_engine_restarts < 0:
            raise ConfigError("rollout.health_timeout_s (0 = no check) and rollout.max_engine_restarts must be >= 0")
        if self.max_turns < 1:
            raise ConfigError("rollout.max_turns must be >= 1 (1 = single-turn)")
        if self.prompt_style == "raicl" and not self.raicl_index:
            raise ConfigError("rollout.prompt_style=raicl needs rollout.raicl_index=FOLDER (built by `kbench rag build`)")
        if not 0 <= self.gamma <= 1:
            raise ConfigError(f"rollout.gamma must be in [0, 1], got {self.gamma}")
        if self.prompts_per_step < 1 or self.n_samples_per_prompt < 1:
            raise ConfigError("rollout.prompts_per_step and rollout.n_samples_per_prompt must be >= 1")
        if self.refill_max_rounds < 0:
            raise ConfigError("rollout.refill_max_rounds must be >= 0 (0 = no refill)")
        if self.overlong == "penalty" and not 0 < self.overlong_buffer <= self.max_new_tokens:
            raise ConfigError(f"rollout.overlong=penalty needs 0 < rollout.overlong_buffer <= max_new_tokens "
                              f"({self.max_new_tokens}), got {self.overlong_buffer}")


@dataclasses.dataclass(kw_only=True)
class RewardConfig:
    preset: Literal["tritonforge", "kevin", "staged", "correct", "speed"] = "tritonforge"
    reward_fn: str = ""
    """Dotted path overriding the preset: reward_fn(cfg: RewardConfig, samples: list[Sample]) -> list[float].
    Each sample carries its EvalResult in `eval_result`."""
    rejected_reward: float = -1.0
    """A candidate that broke the rules; must stay below every preset's lowest reward (0)."""
    speedup_cap: float = 2.0
    """tritonforge/staged/speed: the speed bonus (or, for speed, malus) is min(speedup - 1, speedup_cap)."""
    staged_format: float = 0.1
    staged_compile: float = 0.2
    staged_correct: float = 0.7
    staged_speed: float = 1.0
    eval_actors: int = 1
    """Ray actors that run Evaluators: one per GPU, or a few running the interpreter on CPU."""
    gpus_per_eval_actor: int = 0
    evaluators_per_actor: int = 1
    """Evaluators inside each eval actor, on its device: candidates compile and run their correctness
    trials side by side and are timed one at a time (kbencheval's device gate). Above 1, another
    candidate's queued GPU work can still overlap a timing (docs/evaluator.md)."""
    deadline_margin_s: float = 60.0
    """One deadline rule: the per-candidate limit is the evaluator's own, reward.eval.timeout_s, so a
    slow candidate gets its clean `timeout` verdict; the pool replaces an actor only when it has not
    answered after eval.timeout_s + deadline_margin_s (a hang the evaluator could not cut, a crash)."""
    actor_start_timeout_s: float = 600.0
    """How long an eval actor may take to start (its Evaluators: fork server and judge) before the step
    stops with an error. A candidate's deadline is counted from its actor's start, not its own."""
    RENAMED = {"num_workers": "eval_actors", "num_gpus_per_worker": "gpus_per_eval_actor",
               "evaluators_per_worker": "evaluators_per_actor", "worker_start_timeout_s": "actor_start_timeout_s"}
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    """kbencheval's EvalConfig, the same section `kbench run-one` / `kbench eval` take as eval.*:
    reward.eval.device=cuda reward.eval.trials=2 reward.eval.timeout_s=300 ... (timing_mode stays trusted: the
    others are comparison-only and refused here)"""

    def validate(self) -> None:
        if self.rejected_reward >= 0:
            raise ConfigError(f"reward.rejected_reward must be < 0 so rejected stays lowest, got {self.rejected_reward}")
        if self.gpus_per_eval_actor not in (0, 1):
            raise ConfigError("reward.gpus_per_eval_actor must be 0 (interpreter on CPU) or 1 (one GPU per eval actor)")
        if self.eval_actors < 1 or self.deadline_margin_s < 0 or self.actor_start_timeout_s <= 0:
            raise ConfigError("reward.eval_actors must be >= 1, reward.deadline_margin_s >= 0 and "
                              "reward.actor_start_timeout_s > 0")
        if self.evaluators_per_actor < 1:
            raise ConfigError(f"reward.evaluators_per_actor={self.evaluators_per_actor}: set it >= 1")
        self.eval.require_reward_grade("reward.eval")


@dataclasses.dataclass(kw_only=True)
class RLConfig:
    """`smart rl configs/rl_tiny_cpu.yaml [key=value ...]`"""

    model_path: str = ""
    """HF folder (e.g. the SFT run's out_dir/hf) or hub id; trainer and engines both load it."""
    out_dir: str = "runs/rl"
    num_steps: int = 2
    max_minutes: float = 0.0
    """Wall-clock budget of the loop (`smart rl` only): the first step to end past it is the last, saved and
    exported like step num_steps (0: no budget). A machine hold of fixed length then ends cleanly."""
    mode: Literal["full", "rollout_only", "train_only"] = "full"
    """Debug modes: rollout_only generates and scores (no trainer); train_only trains on replay_dir."""
    replay_dir: str = ""
    """Folder of saved rollouts (step_00000.jsonl, ...) used instead of generating."""
    save_rollouts: bool = True
    """Write each step's samples to out_dir/rollouts/step_XXXXX.jsonl (replayable)."""
    normalize_std: bool = True
    """GRPO advantages divided by the group's std (False = Dr. GRPO)."""
    positive_only: bool = False
    """Advantages below 0 set to 0: samples worse than their group are not pushed down, only better ones up."""
    eval_every: int = 0
    """Steps between held-out evals (0 = never)."""
    save_every: int = 1
    """Steps between checkpoints (0 = only at the end)."""
    keep_last_n: int = 2
    """Checkpoints kept in out_dir/checkpoints; older ones are deleted after each save (0 = keep all)."""
    resume: bool = True
    """Continue from the newest checkpoint in out_dir/checkpoints if there is one."""
    export_hf: bool = True
    """Write the final policy as a HF folder to out_dir/hf."""
    export_hf_every: int = 0
    """Steps between HF folders of the policy in out_dir/hf_steps/step_N (N steps done), for evaluations over
    training; 0 = none (the final policy still goes to out_dir/hf)."""
    seed: int = 0
    """Seeds the driver's RNGs, the order problems are drawn in and the engines' sampling seeds."""
    max_staleness: int = 1
    """`smart rl-async` only (`smart rl` is always 0): trainer updates a sample's weights may lag behind the
    weights that train on it; step n+1 is generated while step n trains when >= 1. > 0 needs train.grpo.tis_clip > 0."""
    backend: str = "torch"
    """Training backend (smart.backends.BACKENDS); it decides what the `train:` section holds."""
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    reward: RewardConfig = dataclasses.field(default_factory=RewardConfig)
    train: Any = section_chosen_by("backend", backend_config_class, "torch")
    """The backend's own knobs (lr, loss terms, micro-batching): smart.backends.torch.config.TrainConfig."""

    def __post_init__(self) -> None:
        if self.train is None:
            self.train = backend_config_class(self.backend)()

    def validate(self) -> None:
        _check_backend(self.backend, self.train)
        if self.mode != "train_only" and not self.model_path:
            raise ConfigError("model_path is empty: set model_path=/path/to/hf_folder (e.g. the SFT run's out_dir/hf)")
        if self.mode == "train_only" and not self.replay_dir:
            raise ConfigError("mode=train_only trains on saved rollouts: set replay_dir=RUN/rollouts")
        urls, engines = self.rollout.sglang_urls, self.cluster.rollout_num_engines
        if self.rollout.engine == "sglang" and len(urls) != engines:
            raise ConfigError(f"rollout.sglang_urls has {len(urls)} URLs for cluster.rollout_num_engines={engines}: "
                              "give one server URL per engine")
        if self.keep_last_n < 0:
            raise ConfigError("keep_last_n must be >= 0 (0 keeps every checkpoint)")
        if self.export_hf_every < 0:
            raise ConfigError(f"export_hf_every must be >= 0 (0: no exports during training), got {self.export_hf_every}")
        if self.max_minutes < 0:
            raise ConfigError(f"max_minutes must be >= 0 (0: no wall-clock budget), got {self.max_minutes}")
        if self.max_staleness < 0:
            raise ConfigError(f"max_staleness must be >= 0 (0 = on-policy, 1 = overlap one step), got {self.max_staleness}")
        if self.mode != "rollout_only":
            _check_on_policy_sampling(self.rollout, self.train)


@dataclasses.dataclass(kw_only=True)
class SFTConfig:
    """`smart sft configs/sft_tiny_cpu.yaml [key=value ...]`"""

    RENAMED = {"kernel_backend": "kernel_language"}

    model_path: str = ""
    out_dir: str = "runs/sft"
    num_steps: int = 4
    batch_size: int = 4
    """Conversations per optimizer step."""
    kernel_language: str = "triton"
    """triton | cuda: asked for in the prompts built for problems (data.sft_jsonl rows bring their own)."""
    prompt_style: str = "one_shot"
    save_every: int = 0
    keep_last_n: int = 2
    """Checkpoints kept in out_dir/checkpoints (0 = keep all)."""
    resume: bool = True
    export_hf: bool = True
    seed: int = 0
    """Seeds the batch order (a resumed run sees the batches a fresh one would)."""
    backend: str = "torch"
    """Training backend (smart.backends.BACKENDS); it decides what the `train:` section holds."""
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(heldout_fraction=0.0))
    train: Any = section_chosen_by("backend", backend_config_class, "torch")
    """The backend's own knobs: smart.backends.torch.config.TrainConfig."""

    def __post_init__(self) -> None:
        if self.train is None:
            self.train = backend_config_class(self.backend)()

    def validate(self) -> None:
        _check_backend(self.backend, self.train)
        if not self.model_path:
            raise ConfigError("model_path is empty: set model_path=/path/to/hf_folder")
        if self.batch_size < 1:
            raise ConfigError("batch_size must be >= 1")


def _check_on_policy_sampling(rollout: RolloutConfig, train: Any) -> None:
    """The trainer's ratio assumes tokens came from softmax(z / T); top-p and greedy break that."""
    if rollout.top_p < 1:
        raise ConfigError(f"rollout.top_p={rollout.top_p} samples from a truncated distribution that the trainer does "
                          "not score (off-policy gradients); set rollout.top_p=1.0 for training (top_p < 1 is fine "
                          "with mode=rollout_only)")
    if rollout.temperature <= 0:
        raise ConfigError("rollout.temperature must be > 0 for training (greedy samples have no usable logprobs)")
    grpo = getattr(train, "grpo", None)
    if grpo is not None and grpo.temperature not in (1.0, rollout.temperature):
        raise ConfigError(f"train.grpo.temperature={grpo.temperature} differs from rollout.temperature="
                          f"{rollout.temperature}; leave train.grpo.temperature unset, smart rl copies it from rollout")


def _check_backend(backend: str, train: Any) -> None:
    expected = backend_config_class(backend)  # an unknown backend is a ConfigError naming the choices
    if type(train) is not expected:  # exact: MegatronTrainConfig subclasses the torch TrainConfig
        raise ConfigError(f"the train: section is a {type(train).__name__} but backend={backend} reads a "
                          f"{expected.__name__}; put backend: in the YAML file, so train: is read for it (choices: {', '.join(BACKENDS)})")


def load_plugin(path: str, what: str) -> Callable:
    """Resolve "pkg.module:func" or "pkg.module.func" to the function, or raise one line naming the fix."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{what}={path!r} is not a dotted path: write it as package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{what}={path!r}: cannot import module {module_name!r} ({e})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{what}={path!r}: module {module_name!r} has no function {attr!r}")
    return fn


def check_model_path(path: str) -> None:
    # Called when a run starts (configs may name a path an earlier stage creates): one line, before Ray.
    resolve_model_path(path, "model_path")  # a ModelPathError is a ConfigError
