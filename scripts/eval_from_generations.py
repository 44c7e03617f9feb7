"""Evaluate a run's generations on every local GPU (or the CPU), with KernelBench's arguments.

    python scripts/eval_from_generations.py run_name=qwen_l1 num_gpu_devices=8 timeout=300
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without pip install

from kbencheval.bench import evaluate
from kbencheval.bench.common import translate_kernelbench_args

ALIASES = {"num_gpu_devices": "num_gpus", "timeout": "eval.timeout_s", "num_correct_trials": "eval.trials",
           "num_perf_trials": "eval.iters", "measure_performance": "eval.timing"}
_NOT_NEEDED = "not needed: the run's manifest records it"
IGNORED = {
    "dataset_src": _NOT_NEEDED,
    "dataset_name": _NOT_NEEDED,
    "level": _NOT_NEEDED,
    "eval_mode": "evaluation is always local (one sandboxed evaluator per GPU)",
    "gpu": "the local GPUs are used",
    "gpu_arch": "Triton compiles for the local GPU",
    "build_cache": "Triton caches its own compilations",
    "num_cpu_workers": "no separate precompile step",
}

if __name__ == "__main__":
    sys.exit(evaluate.main(translate_kernelbench_args(sys.argv[1:], ALIASES, IGNORED)))
