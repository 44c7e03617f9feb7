"""`kbench corpus verify|filter`: see kbencheval/corpus/verify.py and filter.py (each takes --help)."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "verify": ("kbencheval.corpus.verify", "run every record through the evaluator; keep the verdicts"),
    "filter": ("kbencheval.corpus.filter", "verdict, dedup and decontamination filters -> SFT dataset folder"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: kbench corpus <verify|filter> key=value ...\n")
        for name, (module, text) in COMMANDS.items():
            print(f"kbench corpus {name}: {text}")
            importlib.import_module(module).main(["--help"])
            print()
        return 0
    if argv[0] not in COMMANDS:
        print(f"kbench corpus: unknown command '{argv[0]}'; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:]) or 0)
