"""`kbench`: the kbencheval command line.

    kbench check --ref PROBLEM.py --kernel CANDIDATE.py [--device cpu|cuda|cuda:N] [--json]
    kbench serve-eval [--device cuda:0] [--socket PATH] [key=value ...]
    kbench run-one dataset_src=bundled level=1 problem_id=1 server_type=openai ...
    kbench generate / eval / report RUN          kbench report RUN_A RUN_B   (paired comparison)
    kbench kernelbench import KB_RUN_DIR | export RUN
    kbench serve --model PATH
    kbench corpus verify|filter key=value ...      kbench rag build key=value ...
    kbench synth --out DIR --n N [--verify]

Each subcommand lives next to the code it drives; this file only dispatches, so `kbench --help`
stays fast (no torch import).
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with `main(argv) -> int`, one-line help)
SUBCOMMANDS = {
    "check": ("kbencheval.eval.cli.check", "evaluate one candidate against one problem"),
    "serve-eval": ("kbencheval.eval.cli.serve", "keep one Evaluator warm for kbench check (Unix socket)"),
    "run-one": ("kbencheval.bench.run_one", "generate one kernel with an LLM and evaluate it"),
    "generate": ("kbencheval.bench.generate", "generate N samples per problem into runs/<name>/"),
    "eval": ("kbencheval.bench.evaluate", "evaluate a run's generations (resumable, all GPUs)"),
    "report": ("kbencheval.bench.report", "fast_p, pass@k and speedup tables with intervals (+ HTML, CSV); "
               "RUN_A RUN_B compares two"),
    "kernelbench": ("kbencheval.bench.kernelbench", "re-judge a KernelBench run folder; export eval_results.json"),
    "serve": ("kbencheval.llm.serve", "serve a local HF model over OpenAI and SGLang routes"),
    "corpus": ("kbencheval.corpus.cli", "verify and filter SFT corpora (KernelBook, Sakana) into a dataset"),
    "rag": ("kbencheval.rag.cli", "build a retrieval index of a corpus for RA-ICL prompts"),
    "synth": ("kbencheval.synth.cli", "generate synthetic problems with verified Triton solutions"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: kbench <command> [args]\n\ncommands:")
        for name, (_, help_text) in SUBCOMMANDS.items():
            print(f"  {name:<10} {help_text}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"kbench: unknown command '{name}'; choose one of {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    try:
        return int(importlib.import_module(SUBCOMMANDS[name][0]).main(rest) or 0)
    except ModuleNotFoundError as e:  # an extra the core install leaves out: one line naming it
        from kbencheval.extras import missing_extra

        if (hint := missing_extra(e)) is None:
            raise
        print(f"kbench {name}: {hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
