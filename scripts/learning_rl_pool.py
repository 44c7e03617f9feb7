"""python scripts/learning_rl_pool.py RUN_DIR N

Keeps N of a learning run's train problems out of SFT for GRPO to draw its prompts from (the learning config's
rl_pool; scripts/run_learning.sh runs this after the synth stage). GRPO on problems SFT trained on for several
epochs starts from a higher correct rate than on new ones (run 10: 86% of rollouts on SFT's problems against 72%
test pass@1), so fewer failing samples carry the signal, and a gain there can be recall of the reference rather
than a better policy. The pool is the N train problems with the highest ids (synth draws problems in random
order); writes

    RUN/synth/rl_pool/level1/*.py              the pool's problem files (GRPO's data.path)
    RUN/synth/sft_train_minus_rl_pool.jsonl    sft_train.jsonl without the pool's conversations (SFT's data)

example: python scripts/learning_rl_pool.py runs/learn_gpu_s0 1000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def make_pool(synth: Path, n: int) -> tuple[int, int]:
    """Writes the pool and SFT's conversations without it; returns (pool problems, SFT conversations kept)."""
    manifest = json.loads((synth / "manifest.json").read_text())
    train = [p for p in manifest["problems"] if p["split"] == "train"]
    train.sort(key=lambda p: int(p["file"].split("_")[0]))
    if not 0 < n < len(train):
        raise ValueError(f"rl_pool={n}, but the synthetic set has {len(train)} train problems: keep some for SFT "
                         f"(0 < rl_pool < {len(train)})")
    pool = train[-n:]
    folder = synth / "rl_pool" / "level1"
    shutil.rmtree(synth / "rl_pool", ignore_errors=True)
    folder.mkdir(parents=True)
    for problem in pool:
        shutil.copyfile(synth / "train" / "level1" / problem["file"], folder / problem["file"])
    keys = {p["key"] for p in pool}
    kept = [line for line in (synth / "sft_train.jsonl").read_text().splitlines()
            if line.strip() and json.loads(line)["problem"] not in keys]
    part = synth / "sft_train_minus_rl_pool.jsonl.part"
    part.write_text("".join(line + "\n" for line in kept))
    part.rename(synth / "sft_train_minus_rl_pool.jsonl")  # last: its presence means the pool is complete
    return len(pool), len(kept)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="the learning run's folder (RUN/synth is read and written)")
    ap.add_argument("n", type=int, help="how many train problems to keep out of SFT for GRPO")
    args = ap.parse_args(argv)
    synth = args.run / "synth"
    try:
        pooled, kept = make_pool(synth, args.n)
    except (OSError, ValueError, KeyError) as e:
        print(f"learning_rl_pool: {synth}: {e}", file=sys.stderr)
        return 2
    print(f"learning_rl_pool: {pooled} train problems for GRPO in {synth / 'rl_pool'}, {kept} SFT conversations kept")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
