"""What crosses from the harness into the sandbox (an allowlisted environment) and back out
(error text without absolute paths outside the scratch folder)."""

from __future__ import annotations

import os
import re

# What CUDA, ROCm and the Python runtime read. Everything else in the harness's environment (hub,
# tracking and API tokens, cloud credentials) stays outside.
EXACT = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
         "CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME"}
PREFIXES = ("CUDA_", "NVIDIA_", "ROCR_", "HIP_", "HSA_")


def sandbox_env(harness_env: dict, *, scratch: str, extra_pythonpath: str, on_cpu: bool) -> dict:
    env = {k: v for k, v in harness_env.items() if k in EXACT or k.startswith(PREFIXES)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=scratch, TMPDIR=scratch, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               TOKENIZERS_PARALLELISM="false", TRITON_CACHE_DIR=os.path.join(scratch, "triton_shared"),
               TORCH_EXTENSIONS_DIR=os.path.join(scratch, "torch_extensions"))
    paths = [extra_pythonpath] + [p for p in harness_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # One hardware queue per CUDA context instead of the driver's eight. Every candidate starts and ends a
    # context of its own, and the driver does those one after another, faster with one queue: about twice
    # as many a second when several processes start contexts at once (benchmarks/probes/context_churn.py).
    # The evaluator's processes run on one stream each (a candidate's side stream is a violation), so what
    # extra queues give, streams running side by side, goes unused.
    env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if on_cpu:
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    return env


_PATH = re.compile(r"(?<![\w.:/~-])(/[\w.+@-]+)+/?")


def scrub(text: str, scratch: str) -> str:
    """Absolute paths outside the scratch folder cut to their last component; scratch paths kept short."""
    scratch = scratch.rstrip("/")

    def short(m: re.Match) -> str:
        path = m.group(0)
        if path == scratch or path.startswith(scratch + "/"):
            return "<scratch>" + path[len(scratch):]
        return "…/" + path.rstrip("/").rsplit("/", 1)[-1]

    return _PATH.sub(short, text)
