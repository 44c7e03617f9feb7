"""KernelBench's own harness on the same candidates, for `benchmarks/eval_harness.py --compare-kernelbench PATH`.

    python benchmarks/eval_harness.py --device cuda --compare-kernelbench ~/KernelBench

PATH is a local checkout of KernelBench (either layout: `src/eval.py` or `src/kernelbench/eval.py`).
Each candidate runs in a fresh process inside that checkout, as its `eval_from_generations.py` runs
it, through `eval_kernel_against_ref` with the same trials as ours (5 correctness, 100 timed), and
only the keyword arguments that version of KernelBench accepts. Its speedup is ref_runtime / runtime
(KernelBench's mean CUDA-event times); where a version reports no ref_runtime, the reference is timed
by a second call with the reference as its own candidate.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DRIVER = r'''
import importlib, inspect, json, sys
sys.path[:0] = ["src", "."]
try:
    kb = importlib.import_module("kernelbench.eval")
except ImportError:
    kb = importlib.import_module("src.eval")
ref_src, new_src, out, device, trials, iters = sys.argv[1:7]
ref_src, new_src = open(ref_src).read(), open(new_src).read()
accepted = inspect.signature(kb.eval_kernel_against_ref).parameters

def run(candidate):
    kwargs = dict(seed_num=42, num_correct_trials=int(trials), num_perf_trials=int(iters), measure_performance=True,
                  device=int(device.partition(":")[2] or 0), backend="triton", verbose=False)
    r = kb.eval_kernel_against_ref(ref_src, candidate, **{k: v for k, v in kwargs.items() if k in accepted})
    return {"compiled": bool(getattr(r, "compiled", False)), "correct": bool(getattr(r, "correctness", False)),
            "runtime_ms": float(getattr(r, "runtime", -1.0) or -1.0),
            "ref_runtime_ms": float(getattr(r, "ref_runtime", -1.0) or -1.0)}

result = run(new_src)
if result["correct"] and result["ref_runtime_ms"] <= 0:  # older versions time only the candidate
    result["ref_runtime_ms"] = run(ref_src.replace("class Model(", "class ModelNew("))["runtime_ms"]
json.dump(result, open(out, "w"))
'''


def check_checkout(path: str) -> Path:
    root = Path(path).expanduser()
    if not ((root / "src" / "eval.py").is_file() or (root / "src" / "kernelbench" / "eval.py").is_file()):
        raise SystemExit(f"--compare-kernelbench {path}: no KernelBench checkout there (expected src/eval.py or "
                         "src/kernelbench/eval.py); clone ScalingIntelligence/KernelBench and pass its folder")
    return root


def evaluate(root: Path, ref_src: str, new_src: str, device: str, trials: int = 5, iters: int = 100,
             timeout_s: float = 600) -> dict:
    """One candidate through KernelBench's harness in a fresh process; adds wall_s, speedup and error."""
    with tempfile.TemporaryDirectory(prefix="kb-compare-") as tmp:
        files = {name: Path(tmp) / name for name in ("driver.py", "ref.py", "new.py", "out.json")}
        files["driver.py"].write_text(DRIVER)
        files["ref.py"].write_text(ref_src)
        files["new.py"].write_text(new_src)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(files["driver.py"]), str(files["ref.py"]), str(files["new.py"]),
                                   str(files["out.json"]), device, str(trials), str(iters)],
                                  cwd=root, capture_output=True, text=True, timeout=timeout_s)
            error = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        except subprocess.TimeoutExpired:
            error = f"KernelBench's harness did not finish within {timeout_s:g} s"
        wall = time.perf_counter() - t0
        result = json.loads(files["out.json"].read_text()) if files["out.json"].is_file() else {}
    speedup = (result["ref_runtime_ms"] / result["runtime_ms"]
               if result.get("correct") and result.get("runtime_ms", 0) > 0 and result.get("ref_runtime_ms", 0) > 0
               else None)
    return {**result, "speedup": speedup, "wall_s": round(wall, 3), "error": error[:200]}


def agreement(ours: float | None, theirs: float | None) -> float | None:
    """ours / KernelBench's speedup for one problem (1.0 = the harnesses agree)."""
    return round(ours / theirs, 4) if ours and theirs else None
