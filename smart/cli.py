"""`smart`: the training command line.

    smart sft configs/sft_tiny_cpu.yaml [key=value ...]
    smart rl  configs/rl_tiny_cpu.yaml  [key=value ...]   (mode=rollout_only | train_only, replay_dir=...)
    smart rl-async configs/rl_tiny_cpu.yaml train.grpo.tis_clip=2 [max_staleness=1] [key=value ...]
    smart sft configs/sft_tiny_cpu.yaml num_steps=10 --check     (validate the config and overrides only)

Only dispatches, so `smart --help` stays fast (no torch or Ray import).
"""

from __future__ import annotations

import importlib
import os
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
    # Token auth, Ray's default for a new local cluster, but chosen, so Ray does not warn that it picked it.
    # Only before Ray is imported: it reads the mode once, and a driver that read none cannot join a
    # cluster that its children start with tokens (smart's own command line imports Ray later).
    if "ray" not in sys.modules:
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        if "--check" in rest:
            return check(name, [a for a in rest if a != "--check"])
        module = importlib.import_module(SUBCOMMANDS[name][0])
        return int(module.main(rest) or 0)
    except ModuleNotFoundError as e:  # an extra the core install leaves out: one line naming it
        from kbencheval.extras import missing_extra

        if (hint := missing_extra(e)) is None:
            raise
        print(f"smart {name}: {hint}", file=sys.stderr)
        return 2
    except ValueError as e:  # config and data errors already name the fix: one line, no traceback
        from kbencheval.config import ConfigError

        if isinstance(e, ConfigError):
            print(f"smart {name}: {e}", file=sys.stderr)
            return 2
        raise


def check(name: str, argv: list[str]) -> int:
    """`smart <command> CONFIG [key=value ...] --check`: every key and override validated, nothing started;
    prints the one line of a finished run (nothing to train), else nothing. The launchers run it before
    building a model, so a typo costs a second, not a model build."""
    from pathlib import Path

    from smart.config import RLConfig, SFTConfig, load_config
    from smart.tracking import finished_message, finished_step

    if not argv or argv[0].startswith("-"):
        print(f"usage: smart {name} CONFIG.yaml [key=value ...] --check", file=sys.stderr)
        return 2
    cfg = load_config(SFTConfig if name == "sft" else RLConfig, argv[0], argv[1:])
    if name == "rl-async":
        from smart.train_async import check_async

        check_async(cfg)
    done = finished_step(Path(cfg.out_dir), cfg.num_steps, cfg.export_hf) if cfg.resume else None
    if done is not None:
        print(finished_message(cfg.out_dir, done, cfg.num_steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
