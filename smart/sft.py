"""SFT: masked cross-entropy on assistant tokens, in the same Ray training actor group RL uses.

    smart sft configs/sft_tiny_cpu.yaml [key=value ...]
    smart sft configs/sft_tiny_cpu.yaml data.sft_jsonl=chats.jsonl num_steps=100
    smart sft configs/sft_tiny_cpu.yaml data.sft_dataset=owner/name data.sft_split=train   # or a parquet/save_to_disk path

Data: a JSONL file of {"messages": [...]} conversations, a dataset's `messages` column, or (default) every training problem's
prompt from kbencheval.prompts with its bundled reference solution as the answer. The final model
goes to OUT/hf, which `smart rl model_path=OUT/hf` starts from.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import ray

from kbencheval.config import config_help, wants_help
from smart.config import SFTConfig, check_model_path, load_config
from smart.ray.actor_group import TrainGroup
from smart.ray.placement import make_placement
from smart.rollout.data import conversation_to_sample, load_sft_conversations
from smart.tracking import (PhaseTimer, Tracker, done_message, finished_message, finished_step, init_ray,
                            latest_checkpoint, progress, read_run_state, save_checkpoint, seed_everything)


def train_sft(cfg: SFTConfig) -> dict:
    """Run cfg.num_steps optimizer steps of SFT (resuming if a checkpoint exists); returns the last metrics."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model_path)
    convs = load_sft_conversations(cfg.data, cfg.kernel_language, cfg.prompt_style)
    samples = [conversation_to_sample(tokenizer, messages, i) for i, messages in enumerate(convs)]

    seed_everything(cfg.seed)
    started_ray = init_ray(cfg.cluster)
    progress("sft", "Ray up")
    out = Path(cfg.out_dir)
    ckpt = latest_checkpoint(out) if cfg.resume else None
    start = read_run_state(ckpt)["next_step"]
    placement = make_placement(cfg.cluster, need_rollout=False)
    actor = TrainGroup.for_run(cfg, placement.actor)
    progress("sft", f"trainer loaded {cfg.model_path}" + (f"; resuming at step {start}" if start else ""))
    tracker = Tracker(out, cfg.num_steps, "sft", tracking=cfg.tracking, config=dataclasses.asdict(cfg),
                      start_step=start)
    metrics: dict = {}
    try:
        if ckpt:
            actor.load_checkpoint(str(ckpt / "trainer"))
        for step in range(start, cfg.num_steps):
            timer = PhaseTimer()
            with timer("train"):
                metrics = {f"train/{k}": v for k, v in actor.train_sft(batch_for(samples, step, cfg)).items()}
            if step + 1 == cfg.num_steps or (cfg.save_every and (step + 1) % cfg.save_every == 0):
                with timer("save"):
                    save_checkpoint(out, step, actor, {}, cfg.keep_last_n)
            metrics |= timer.metrics()
            tracker.log(step, metrics)
        if cfg.export_hf:
            actor.export_hf(str(out / "hf"))
    finally:
        tracker.close()
        actor.shutdown()
        ray.util.remove_placement_group(placement.pg)
        if started_ray:
            ray.shutdown()
    return metrics


def batch_for(samples: list, step: int, cfg: SFTConfig) -> list:
    """Step k's batch: a seeded shuffle per epoch, so a resumed run sees the batches it would have seen."""
    per_epoch = max(len(samples) // cfg.batch_size, 1)
    epoch, k = divmod(step, per_epoch)
    order = list(range(len(samples)))
    random.Random(cfg.seed * 100003 + epoch).shuffle(order)
    picked = [order[(k * cfg.batch_size + j) % len(order)] for j in range(cfg.batch_size)]
    return [samples[i] for i in picked]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print(config_help(SFTConfig, "smart sft CONFIG.yaml [key=value ...]   (or bash scripts/run_sft.sh ...)",
                          "smart sft configs/sft_tiny_cpu.yaml data.sft_jsonl=chats.jsonl num_steps=100"))
        return 0
    if not argv or argv[0].startswith("-"):
        print("usage: smart sft CONFIG.yaml [key=value ...]  (smart sft --help lists every key)", file=sys.stderr)
        return 2
    cfg = load_config(SFTConfig, argv[0], argv[1:])
    done = finished_step(Path(cfg.out_dir), cfg.num_steps, cfg.export_hf) if cfg.resume else None
    if done is not None:  # before Ray and the model: a rerun of a finished run has nothing to do
        print(finished_message(cfg.out_dir, done, cfg.num_steps))
        return 0
    check_model_path(cfg.model_path)
    train_sft(cfg)
    print(done_message("SFT", cfg.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
