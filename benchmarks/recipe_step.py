"""One multi-turn GRPO step of a run config through scripts/run_rl.sh, and what it cost: peak memory per GPU,
seconds per phase (rollout, reward, logprobs, train, weight sync) and weight-sync GB/s (issue 47).

    python benchmarks/recipe_step.py configs/rl_qwen3_8b_layout_2gpu.yaml --out OUT/recipe_2gpu.json
    python benchmarks/recipe_step.py configs/rl_qwen3_8b_megatron.yaml --shape qwen3-8b \
        --model /tmp/tritonforge_qwen3_8b --out OUT/recipe_8gpu.json rollout.max_new_tokens=1024

The model is random: --shape small is scripts/make_tiny_model.py's 512-hidden, 8-layer Qwen3; --shape qwen3-8b is
Qwen3-8B's shape (36 layers, hidden 4096, vocab 151,936), built on the GPU in bf16 and kept in --model, so a
later call on the same machine reuses it (--build-only builds it and stops). The run is the config as committed
plus: num_steps=1, rewards from smart.reward.controls:length_reward (the Evaluators still judge every turn, but a
random model's replies would all score alike and leave GRPO nothing to train on), no group filter, no HF export,
and the key=value overrides given. Memory is every process on each GPU (nvidia-smi, sampled every 0.5 s), the
phases are the step's own metrics from OUT_DIR/tb; weight-sync GB/s counts the weights once in bf16 (each engine
receives that much).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

QWEN3_8B = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=False,
                max_position_embeddings=40960, rope_theta=1_000_000.0)
FIXED = ["num_steps=1", "eval_every=0", "export_hf=false", "resume=false", "rollout.filter_fn=",
         "reward.reward_fn=smart.reward.controls:length_reward"]


def _make_tiny_model():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "scripts" / "make_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model(shape: str, folder: Path) -> Path:
    """A random model of `shape` in `folder` (kept if it is already there)."""
    if (folder / "config.json").is_file():
        return folder
    make = _make_tiny_model()
    if shape in ("tiny", "small"):  # tiny: the CPU smoke run
        return make.build(folder, **(dict(hidden=512, layers=8) if shape == "small" else {}))
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = make.train_tokenizer(1024)  # ids past it are never decoded to text: the reply just skips them
    cfg = Qwen3Config(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, **QWEN3_8B)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    tmp = folder.with_name(folder.name + ".partial")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(folder)  # a killed build leaves no folder that looks finished
    return folder


def param_count(folder: Path) -> int:
    from safetensors import safe_open

    n = 0
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():
                shape = st.get_slice(key).get_shape()
                n += math.prod(shape)
    return n


def visible_gpus() -> list[int] | None:
    """The physical indices in CUDA_VISIBLE_DEVICES, in the run's order; None when unset or not plain indices."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None


class GpuMemory:
    """Peak memory.used per GPU of this run, all processes on it together (nvidia-smi, every 0.5 s). nvidia-smi
    ignores CUDA_VISIBLE_DEVICES, so the run's GPUs are asked for by physical index and reported by the run's own
    index (the numbering the config's placement uses), with the physical one beside it."""

    def __init__(self):
        self.peak_mib: dict[int, int] = {}
        self.total_mib: dict[int, int] = {}
        if not shutil.which("nvidia-smi"):  # the CPU smoke run: no GPUs to watch
            self.proc = None
            return
        self.physical = visible_gpus()
        only = ["--id=" + ",".join(map(str, self.physical))] if self.physical else []
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=index,memory.used,memory.total", *only,
                                      "--format=csv,noheader,nounits", "-lms", "500"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                index, used, total = (int(float(x)) for x in line.split(","))
            except ValueError:
                continue
            self.peak_mib[index] = max(self.peak_mib.get(index, 0), used)
            self.total_mib[index] = total

    def stop(self) -> dict:
        if self.proc is None:
            return {}
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=5)
        return self.report()

    def report(self) -> dict:
        run_index = {p: i for i, p in enumerate(self.physical)} if self.physical else {}
        return {str(run_index.get(i, i)): {"peak_gib": self.peak_mib[i] / 1024, "total_gib": self.total_mib[i] / 1024,
                                           "physical_gpu": i}
                for i in sorted(self.peak_mib)}


def phases(scalars: dict) -> dict:
    """Seconds per phase of step 0 from the run's metrics (smart/train.py's PhaseTimer and the rollout's)."""
    def get(name: str) -> float:
        return float(scalars.get(name, {}).get(0, 0.0))

    logprobs = get("train/logprobs_s")
    return {"rollout": get("time/rollout"), "generate": get("time/generate") - get("time/generate_eval"),
            "eval_between_turns": get("time/generate_eval"), "reward": get("time/reward"), "logprobs": logprobs,
            "train": get("time/train") - logprobs, "weight_sync": get("time/sync"), "save": get("time/save"),
            "step": get("time/step")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one GRPO step of a run config: memory per GPU, seconds per phase",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("overrides", nargs="*", help="key=value for the run (after the fixed ones, so they win)")
    ap.add_argument("--shape", default="small", choices=("tiny", "small", "qwen3-8b"))
    ap.add_argument("--model", default="", help="folder of the random model (built if missing); default: a temp dir")
    ap.add_argument("--run-dir", default="/tmp/tritonforge_recipe_run", help="the run's out_dir (emptied first)")
    ap.add_argument("--timeout", type=float, default=520, help="seconds the run may take")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_intermixed_args(argv)

    t0 = time.perf_counter()
    model = build_model(args.shape, Path(args.model or f"/tmp/tritonforge_model_{args.shape}"))
    build_s = time.perf_counter() - t0
    params = param_count(model)
    print(f"model {model}: {params / 1e6:.1f}M params ({args.shape}), ready in {build_s:.0f} s", flush=True)
    if args.build_only:
        return 0
    run_dir = Path(args.run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = ["bash", "scripts/run_rl.sh", args.config, f"model_path={model}", f"out_dir={run_dir}", *FIXED,
           *args.overrides]
    memory = GpuMemory()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, timeout=args.timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = 124
    wall = time.perf_counter() - t0
    gpus = memory.stop()
    from smart.tracking import read_scalars

    scalars = read_scalars(run_dir / "tb") if (run_dir / "tb").is_dir() else {}
    secs = phases(scalars)
    gb = params * 2 / 1e9  # bf16, as the trainer hands them to the engines
    result = {"config": args.config, "overrides": FIXED + args.overrides, "shape": args.shape, "params": params,
              "exit": rc, "wall_s": wall, "phases_s": secs, "weights_gb_bf16": gb,
              "weight_sync_gb_per_s": gb / secs["weight_sync"] if secs["weight_sync"] else None,
              "gpus": gpus, "metrics": {k: v.get(0) for k, v in scalars.items()}}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"exit {rc} after {wall:.0f} s; {params / 1e6:.1f}M params, {gb:.2f} GB in bf16")
    for gpu, m in gpus.items():
        print(f"GPU {gpu}: peak {m['peak_gib']:.1f} of {m['total_gib']:.1f} GiB")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in secs.items()))
    rate = result["weight_sync_gb_per_s"]
    print(f"weight sync: {secs['weight_sync']:.2f} s, {rate:.2f} GB/s" if rate else "weight sync: did not run")
    if os.environ.get("RECIPE_KEEP_RUN") != "1":
        shutil.rmtree(run_dir, ignore_errors=True)  # checkpoints at the 8B shape are ~100 GB
    return rc


if __name__ == "__main__":
    sys.exit(main())
