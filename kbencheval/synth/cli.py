"""`kbench synth`: generate synthetic problems + solutions into a folder, optionally verified.

    kbench synth --out runs/synth --n 2000 --seed 0                       # static checks only
    kbench synth --out runs/synth --n 200 --verify --device cpu --evaluators 2  # + the real evaluator
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from kbencheval.config import ConfigError


def _parser() -> argparse.ArgumentParser:
    from kbencheval.synth.render import STYLES  # text only: --help stays fast

    ap = argparse.ArgumentParser(prog="kbench synth", description="generate synthetic KernelBench problems with "
                                 "Triton solution variants, split train/held-out by operator pairs",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                 epilog="example: kbench synth --out runs/synth --n 200 --verify --device cpu --evaluators 2")
    ap.add_argument("--out", required=True, help="output folder (train/, heldout/, manifest.json, sft_train.jsonl)")
    ap.add_argument("--n", type=int, default=200, help="problems to generate, both splits together")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout-fraction", type=float, default=0.2)
    ap.add_argument("--test-fraction", type=float, default=0.0,
                    help="in-distribution test split: problems sampled like train ones, never trained on")
    ap.add_argument("--heldout-pairs", type=int, default=16, help="operator pairs only held-out problems contain")
    ap.add_argument("--max-inputs", type=int, default=3)
    ap.add_argument("--max-depth", type=int, default=3)
    ap.add_argument("--min-ops", type=int, default=2, help="fewest operators per expression (the tail not counted)")
    ap.add_argument("--max-ops", type=int, default=0, help="most operators per expression, 0: no bound")
    ap.add_argument("--dtypes", default="float32,float32,float32,float16,bfloat16",
                    help="comma list drawn uniformly per problem (repeat one to weight it)")
    ap.add_argument("--prompt-style", default="zero_shot", help="prompt style of the SFT conversations")
    ap.add_argument("--sft-variants", default="mix", choices=("canonical", "all", "mix"))
    ap.add_argument("--variants", default="", help="solution variants to keep, comma-separated (e.g. "
                    "fused_b1024,fused_w4,per_op: a fast and a slow one for the speed stage); default all")
    ap.add_argument("--max-variants", type=int, default=0,
                    help="keep the first K solution variants per problem, canonical first (0: all)")
    ap.add_argument("--solution-style", default="ssa", choices=STYLES,
                    help="ssa: one statement per operator; inline: one nested expression shaped like PyTorch's; "
                    "mixed: every variant both ways (inline_V, ssa_V)")
    ap.add_argument("--verify", action="store_true", help="run every solution variant through the evaluator")
    ap.add_argument("--device", default="cpu", help="evaluator device for --verify: cpu (interpreter) or cuda[:N]")
    ap.add_argument("--evaluators", type=int, default=1, help="evaluators run side by side for --verify")
    ap.add_argument("--workers", type=int, help=argparse.SUPPRESS)  # renamed: a clear error below
    ap.add_argument("--trials", type=int, default=2, help="correctness trials per variant for --verify")
    ap.add_argument("--timing", action="store_true", help="with --verify on a GPU: time every variant too")
    return ap


def main(argv: list[str] | None = None) -> int:
    from kbencheval.synth.build import SynthConfig, static_filter, timed_generate, verify, write

    args = _parser().parse_args(argv)
    try:
        cfg = SynthConfig(n=args.n, seed=args.seed, heldout_fraction=args.heldout_fraction,
                          test_fraction=args.test_fraction, min_ops=args.min_ops, max_ops=args.max_ops,
                          heldout_pairs=args.heldout_pairs, max_inputs=args.max_inputs, max_depth=args.max_depth,
                          dtypes=[d.strip() for d in args.dtypes.split(",") if d.strip()],
                          prompt_style=args.prompt_style, sft_variants=args.sft_variants,
                          variants=[v.strip() for v in args.variants.split(",") if v.strip()],
                          max_variants=args.max_variants, solution_style=args.solution_style)
        if args.timing and not (args.verify and args.device.startswith("cuda")):
            raise ConfigError("--timing needs --verify --device cuda (the interpreter's timings mean nothing)")
        if args.workers is not None:
            raise ConfigError("--workers was renamed --evaluators (a 'worker' is only a candidate's process now)")
        if args.evaluators < 1:
            raise ConfigError(f"--evaluators must be >= 1, got {args.evaluators}")
        out = Path(args.out)
        if (out / "manifest.json").exists():
            raise ConfigError(f"{out} already holds a synth run (manifest.json); pass a new --out or delete it")
        problems, stats = timed_generate(cfg)
        print(f"generated {len(problems)} problems in {stats['generate_seconds']:.2f} s "
              f"({stats['problems_per_minute']:,} problems/min)")
        if args.verify:
            kept, dropped = verify(problems, device=args.device, evaluators=args.evaluators, trials=args.trials,
                                   timing=args.timing)
        else:
            kept, dropped = static_filter(problems)
        stats["verified"] = bool(args.verify)
        manifest = write(kept, out, cfg, dropped, stats)
    except ConfigError as e:
        print(f"kbench synth: {e}", file=sys.stderr)
        return 2
    counts = manifest["counts"]
    variants = sum(len(p["variants"]) for p in manifest["problems"])
    print(f"kept {counts['train']} train + {counts['test']} test + {counts['heldout']} held-out problems, {variants} solution variants, "
          f"{counts['sft_rows']} SFT rows -> {out}")
    n_dropped = sum(dropped.values())
    print(f"dropped {n_dropped}" + (":" if n_dropped else ""))
    for reason, count in sorted(dropped.items(), key=lambda kv: -kv[1]):
        print(f"  {count:5d}  {reason}")
    timed = [p["speedups"] for p in manifest["problems"] if p["speedups"]]
    if timed:
        best = collections.Counter(max(s, key=s.get) for s in timed)
        print("fastest variant per problem: " + ", ".join(f"{v} {n}" for v, n in best.most_common()))
    print(json.dumps({"counts": counts, "dropped": n_dropped, **stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
