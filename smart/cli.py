"""`smart`: the training command line.

    smart sft configs/sft_tiny_cpu.yaml [key=value ...]
    smart rl  configs/rl_tiny_cpu.yaml  [key=value ...]   (mode=rollout_only | train_only, replay_dir=...)
    smart rl-async configs/rl_tiny_cpu.yaml train.grpo.tis_clip=2 [max_staleness=1] [key=value ...]

Only dispatches, so `smart --help` stays fast (no torch or Ray import).
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "sft": ("smart.sft", "supervised fine-tuning on conversations or reference solutions"),
    "rl": ("smart.train", "GRPO on kernel tasks: generate, reward, train, sync (and debug modes)"),
    "rl-async": ("smart.train_async", "GRPO with step n+1's rollout overlapping step n's training (max_staleness, TIS)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: smart <command> CONFIG.yaml [key=value ...]\n\ncommands:")
        for name, (_, help_text) in SUBCOMMANDS.items():
            print(f"  {name:<8} {help_text}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"smart: unknown command '{name}'; choose one of {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except ValueError as e:  # config and data errors already name the fix: one line, no traceback
        from kbencheval.config import ConfigError

        if isinstance(e, ConfigError):
            print(f"smart {name}: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
