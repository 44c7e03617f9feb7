"""`EvalConfig`: every knob of one Evaluator. Keyword-only; `validate()` checks and never mutates."""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from kbencheval.config import ConfigError
from kbencheval.eval.processes.sandbox.minimum import MINIMUM

REWARD_TIMING_MODES = ("trusted",)
"""Timing modes a reward may use. events / cuda_graph time the candidate inside its own worker, where it
can behave differently when captured or timed (a kernel lazy on 7 of 8 graph replays was `correct` at
8.6x under cuda_graph): they are for comparison with published numbers only."""


@dataclasses.dataclass(kw_only=True)
class EvalConfig:
    device: str = "cpu"
    """cpu (Triton interpreter, correctness only), cuda, or cuda:N (ROCm GPUs also appear as cuda)."""
    backend: Literal["triton", "cuda"] = "triton"
    """Which custom-kernel backend candidates must use."""
    trials: int = 5
    """Correctness trials on the problem's own get_inputs(), each with a fresh seed, one model instance."""
    stress_trials: bool = True
    """Also run one trial per stress transform (inputs scaled x0.01/x10/x100, shifted) where the
    reference output stays finite; a problem narrows them with INPUT_DOMAIN."""
    timeout_s: float = 300.0
    """Hard limit for one candidate (import, compile, trials, timing); then its process group is killed."""
    small: bool | None = None
    """Run at the problem's SMALL_SIZES. Default: yes on cpu, no on GPUs."""
    atol: float | None = None
    """Absolute tolerance for every float output; default per problem, else per dtype (fp32 1e-4, bf16/fp16 1e-2).
    Integer and bool outputs are always compared exactly."""
    rtol: float | None = None
    allowed_ops: list[str] = dataclasses.field(default_factory=list)
    """Torch ops a candidate's forward may call on top of the problem's ALLOWED_TORCH_OPS (e.g. aten.convolution)."""
    static_checks: bool = True
    """Scan the code for forbidden constructs before running it. Off only to test the run-time defences."""
    accept_cpu_tripwires_only: bool = False
    """On the CPU there is no device record, so with static_checks=false "the kernels did the work" rests on
    in-process tripwires a candidate can defeat: that configuration is refused unless this is set, and each
    verdict then says so (checks["cpu_verdict"])."""
    sandbox: Literal["auto", "kernel", "bwrap", "none"] = "auto"
    """kernel: the namespace, capability, Landlock and seccomp layers that work here (docs/evaluator.md).
    auto: those, inside bubblewrap when it works. bwrap: require bubblewrap. none: no sandbox (tests, benchmarks).
    Except with none, evaluation refuses without the minimum sandbox (see sandbox_accept)."""
    sandbox_accept: list[str] = dataclasses.field(default_factory=list)
    """Parts of the minimum sandbox this run accepts missing (pid-ns, fs-write, net-ns: sandbox/minimum.py).
    Without them, evaluation refuses where the machine cannot provide all three (the error names the fix);
    with them, each verdict lists the layers that were active and checks["sandbox_weaker"] what was accepted."""
    memory_limit_gb: float = 16.0
    """Host memory cap per candidate (address space on cpu; resident memory watched on GPUs)."""
    cpu_threads: int = 0
    """torch threads in the sandboxed processes (OMP_NUM_THREADS; 0: the environment's, else all cores).
    Evaluators sharing the CPU should split its cores (`cpu_threads_per_evaluator`): 14 interpreter
    Evaluators with every core each drove a 16-core host to a load of 50 and slowed them all."""
    timing: bool = True
    """Time reference and candidate (GPU only; the CPU interpreter's timings mean nothing)."""
    timing_mode: Literal["trusted", "events", "cuda_graph"] = "trusted"
    """trusted: the reference is timed in the judge, the candidate as CUDA-graph replays on fresh inputs
    every iteration, its figures bounded by the harness's wall clock and the physical floor, its timed
    outputs checked. events / cuda_graph: KernelBench-style eager timing inside the candidate's worker
    (numbers the candidate could forge; cuda_graph replays one captured graph on rotating inputs)."""
    timing_on_cpu: bool = False
    """Run the timing protocol under the CPU interpreter too (tests of the protocol; numbers meaningless)."""
    baseline: Literal["eager", "compile"] = "eager"
    """What the candidate is compared against: the eager reference or torch.compile of it."""
    warmup: int = 10
    iters: int = 100
    """Timed calls per model; reference and candidate alternate. In trusted mode the most there will be:
    timing stops after `min_iters` once the speedup is known to `timing_target_rse`."""
    min_iters: int = 20
    """Trusted mode: timed calls per model before timing may stop early (capped by iters; = iters: always
    iters). 20 rather than 40: more candidates/min, equally reproducible, in side-by-side runs
    (docs/history/evaluator-performance.md, "Timing may stop at 20")."""
    timing_target_rse: float = 0.003
    """Trusted mode: stop once the relative standard error of the speedup, from the per-round speedups,
    is at most this (0: never early). Tight enough that the bundled suite's speedups reproduce from pass
    to pass to well under a percent (docs/evaluator.md)."""
    timing_input_sets: int = 8
    """Distinct fresh input sets rotated through the timed calls (at least 2, capped by timing_input_gb)."""
    timing_input_gb: float = 6.0
    """GPU memory the rotating timing inputs may take (Evaluators sharing a GPU split it:
    `device_memory_per_evaluator`)."""
    judge_cache_gb: float = 8.0
    """GPU memory the judge may keep reference outputs in, per problem; outputs past it are recomputed
    when compared (Evaluators sharing a GPU split it too)."""
    l2_flush_mb: int = 256
    seed: int | None = None
    """None: every evaluation draws its seeds from a CSPRNG (`secrets`), so no candidate can know its
    inputs in advance. An int reproduces a run; every verdict records its seeds in checks["seeds"]."""

    def validate(self) -> None:
        """Raise ConfigError (a ValueError) naming the setting to change; never changes the object."""
        if not (self.device == "cpu" or self.device == "cuda" or
                (self.device.startswith("cuda:") and self.device[5:].isdigit())):
            raise ConfigError(f"device={self.device!r} is not supported: use cpu, cuda or cuda:N")
        if self.trials < 1:
            raise ConfigError(f"trials={self.trials}: set trials >= 1 (correctness trials per candidate)")
        if self.timeout_s <= 0:
            raise ConfigError(f"timeout_s={self.timeout_s}: set timeout_s > 0")
        if self.iters < 1 or self.warmup < 0 or self.min_iters < 1:
            raise ConfigError(f"iters={self.iters}, min_iters={self.min_iters}, warmup={self.warmup}: "
                              "set iters >= 1, min_iters >= 1 and warmup >= 0")
        if not 0 <= self.timing_target_rse < 1:
            raise ConfigError(f"timing_target_rse={self.timing_target_rse}: set 0 <= timing_target_rse < 1 "
                              "(0: always time iters calls)")
        if self.timing_input_sets < 2:
            raise ConfigError(f"timing_input_sets={self.timing_input_sets}: set timing_input_sets >= 2")
        if self.timing_on_cpu and self.timing_mode != "trusted":
            raise ConfigError(f"timing_on_cpu needs timing_mode=trusted (got {self.timing_mode}): events need a GPU")
        if self.cpu_threads < 0:
            raise ConfigError(f"cpu_threads={self.cpu_threads}: set cpu_threads >= 0 (0: the environment's)")
        if self.timing_input_gb <= 0 or self.judge_cache_gb < 0:
            raise ConfigError(f"timing_input_gb={self.timing_input_gb}, judge_cache_gb={self.judge_cache_gb}: "
                              "set timing_input_gb > 0 and judge_cache_gb >= 0")
        if self.memory_limit_gb <= 0:
            raise ConfigError(f"memory_limit_gb={self.memory_limit_gb}: set memory_limit_gb > 0")
        if unknown := [a for a in self.sandbox_accept if a not in MINIMUM]:
            raise ConfigError(f"sandbox_accept={','.join(self.sandbox_accept)}: {unknown[0]!r} is not part of the "
                              f"minimum sandbox; name some of {', '.join(MINIMUM)}")
        if self.on_cpu and not self.static_checks and not self.accept_cpu_tripwires_only:
            raise ConfigError("static_checks=false on the CPU leaves 'the kernels did the work' to in-process "
                              "tripwires a candidate can defeat (no device record there): set static_checks=true, "
                              "or accept the weaker verdict with accept_cpu_tripwires_only=true")

    def require_reward_grade(self, where: str = "eval") -> None:
        """Raise unless verdicts under this config may become rewards (smart's reward section, EvalPool)."""
        if self.timing and self.timing_mode not in REWARD_TIMING_MODES:
            raise ConfigError(f"{where}.timing_mode={self.timing_mode} is comparison-only (the candidate's worker "
                              f"times itself, so its figures can be forged): set {where}.timing_mode=trusted")

    def __post_init__(self):
        self.validate()

    @property
    def device_index(self) -> str:
        """The device as torch names it: `cuda` means `cuda:0`."""
        return "cuda:0" if self.device == "cuda" else self.device

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"


def timing_grade(mode: str) -> dict:
    """checks["timing_mode"] of a timed verdict: its mode, and whether a reward may use its numbers."""
    if mode in REWARD_TIMING_MODES:
        return {"mode": mode, "reward_grade": True}
    return {"mode": mode, "reward_grade": False, "why": "comparison-only: timed inside the candidate's worker"}


def check_device(device: str) -> None:
    """Raise ConfigError unless torch can use `device` in this process. Without this, a GPU device on a
    machine without one fails inside the judge, after the whole start, and reads as the candidate's error."""
    if device == "cpu":
        return
    import torch

    count = torch.cuda.device_count()  # asks NVML first: CUDA stays uninitialised here, so forking stays safe
    if count == 0:
        cpu_only = torch.version.cuda is None and torch.version.hip is None
        why = f"torch {torch.__version__} is a CPU-only build" if cpu_only else \
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}" if "CUDA_VISIBLE_DEVICES" in os.environ \
            else "no GPU found"
        raise ConfigError(f"device={device}: no CUDA/ROCm GPU visible to torch ({why}); use --device cpu or "
                          "device=cpu (the Triton interpreter)")
    index = 0 if device == "cuda" else int(device.split(":", 1)[1])
    if index >= count:
        raise ConfigError(f"device={device}: torch sees {count} GPU(s); pick one of cuda:0..cuda:{count - 1}")


def cpu_threads_per_evaluator(cfg: EvalConfig, evaluators_on_cpu: int) -> EvalConfig:
    """`cfg` with the CPU's cores split among `evaluators_on_cpu` Evaluators, unless it sets cpu_threads."""
    if cfg.cpu_threads or evaluators_on_cpu <= 1:
        return cfg
    return dataclasses.replace(cfg, cpu_threads=max(1, (os.cpu_count() or 1) // evaluators_on_cpu))


def device_memory_per_evaluator(cfg: EvalConfig, evaluators_on_device: int) -> EvalConfig:
    """`cfg` with timing_input_gb and judge_cache_gb split among the Evaluators that share one GPU: the
    defaults are sized for one Evaluator, and several each holding them ran the GPU out of memory on
    the bundled suite."""
    if cfg.on_cpu or evaluators_on_device <= 1:
        return cfg
    return dataclasses.replace(cfg, timing_input_gb=cfg.timing_input_gb / evaluators_on_device,
                               judge_cache_gb=cfg.judge_cache_gb / evaluators_on_device)
