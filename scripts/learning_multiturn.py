"""python scripts/learning_multiturn.py ROLLOUTS.jsonl [--manifest RUN/synth/manifest.json] [--out FILE.json]

Per-turn numbers of a multi-turn evaluation (Kevin mode: each unsolved reply gets the evaluator's feedback
and another turn), read from the rollouts that `smart rl mode=rollout_only rollout.max_turns=T` wrote:
for each turn t, the share of trajectories solved by turn t, and of the trajectories that reached turn t
(their earlier turns all failed) the share that turn t fixed; the same per expression size (operators,
from the synthetic set's manifest). Prints JSON.

example: python scripts/learning_multiturn.py runs/learn_cpu/multiturn_sft/rollouts/step_00000.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def first_correct_turns(samples) -> dict[int, tuple[str, int | None, int]]:
    """trajectory id -> (problem key, the first turn that was correct or None, turns taken)."""
    turns: dict[int, list] = defaultdict(list)
    for s in samples:
        turns[s.trajectory_id if s.trajectory_id is not None else -1 - s.index].append(s)
    out = {}
    for tid, taken in turns.items():
        taken.sort(key=lambda s: s.turn)
        first = next((s.turn for s in taken if s.eval_result is not None and s.eval_result.correct), None)
        out[tid] = (taken[0].problem_key, first, len(taken))
    return out


def per_turn(trajectories: list[tuple[str, int | None, int]], max_turns: int) -> dict:
    n = len(trajectories)
    rows = {}
    for t in range(max_turns):
        reached = [first for _, first, _ in trajectories if first is None or first >= t]
        rows[f"turn {t + 1}"] = {
            "solved_by_turn": round(sum(first is not None and first <= t for _, first, _ in trajectories) / max(n, 1), 4),
            "reached": len(reached),
            "fixed_here": round(sum(first == t for first in reached) / len(reached), 4) if reached else None,
        }
    return rows


def summarize(samples, sizes: dict[str, int]) -> dict:
    trajectories = list(first_correct_turns(samples).values())
    max_turns = max((s.turn for s in samples), default=0) + 1
    by_size: dict[str, list] = defaultdict(list)
    for traj in trajectories:
        by_size[str(sizes.get(traj[0]))].append(traj)
    return {"trajectories": len(trajectories), "problems": len({t[0] for t in trajectories}), "max_turns": max_turns,
            "by_turn": per_turn(trajectories, max_turns),
            "by_operators": {size: per_turn(group, max_turns) for size, group in sorted(by_size.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="per-turn numbers of a multi-turn evaluation's rollouts",
                                 epilog="example: python scripts/learning_multiturn.py RUN/multiturn_sft/rollouts/step_00000.jsonl")
    ap.add_argument("rollouts", type=Path, help="a rollouts JSONL written by smart rl")
    ap.add_argument("--manifest", type=Path, help="a kbench synth manifest.json, for the per-size numbers")
    ap.add_argument("--out", type=Path, help="write the JSON here too")
    args = ap.parse_args(argv)
    if not args.rollouts.is_file():
        print(f"learning_multiturn: {args.rollouts} does not exist; pass the rollouts JSONL of a smart rl run",
              file=sys.stderr)
        return 2
    from smart.tracking import load_rollouts

    sizes = {}
    if args.manifest and args.manifest.is_file():
        sizes = {p["key"]: p.get("num_ops") for p in json.loads(args.manifest.read_text())["problems"]}
    result = summarize(load_rollouts(args.rollouts), sizes)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
