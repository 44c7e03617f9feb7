"""Does a captured get_inputs replay what make_inputs makes, while several processes share the GPU?

Each process captures the get_inputs of the first level-1 problems as a CUDA graph, then replays it four
times (seeds 11, 12, 11, 12) and records, per replay, the fraction of elements that differ from
make_inputs under the same seed: once without ("plain") and once with ("capture_sync") a device sync
right after the capture. This is how fresh_inputs.FreshInputs' capture check was found to fail at random.

    python benchmarks/probes/fresh_inputs_probe.py --processes 5 --rounds 2 --out runs/probes/fresh_inputs_probe.json

What it found is in docs/history/evaluator-performance.md ("Timers that copied their inputs by mistake")."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
from pathlib import Path

import torch

SEEDS = (11, 12, 11, 12)
VARIANTS = ("plain", "capture_sync")


def probe(rank: int, rounds: int, problems: int, out: str) -> None:
    """One process: every capture's per-replay differing fractions, written to `out`."""
    from kbencheval.dataset import load_bundled
    from kbencheval.eval.contract.inputs import load_problem_module, make_inputs

    device = torch.device("cuda", 0)
    records = []
    for r in range(rounds):
        for problem in load_bundled(1)[:problems]:
            for variant in VARIANTS:
                module = load_problem_module(problem.source, {})
                want = {s: [x for x in make_inputs(module, s, device) if isinstance(x, torch.Tensor)] for s in SEEDS[:2]}
                graph, stream = torch.cuda.CUDAGraph(), torch.cuda.current_stream(device)
                with torch.cuda.graph(graph), torch.device(device):
                    static = [x for x in module.get_inputs() if isinstance(x, torch.Tensor)]
                torch.cuda.set_stream(stream)
                if variant == "capture_sync":
                    torch.cuda.synchronize(device)
                differing = []
                for seed in SEEDS:
                    torch.manual_seed(seed)  # as make_inputs seeds
                    random.seed(seed)
                    graph.replay()
                    differing.append(max((x != y).float().mean().item() for x, y in zip(static, want[seed])))
                records.append({"rank": rank, "round": r, "problem": problem.key, "variant": variant,
                                "differing_fraction_per_replay": differing})
                del graph, static, want
                torch.cuda.empty_cache()
    Path(out).write_text(json.dumps(records))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=5, help="processes sharing the GPU (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="captures per problem and variant (default 2)")
    parser.add_argument("--problems", type=int, default=14, help="first N level-1 problems (default 14)")
    parser.add_argument("--out", default="runs/probes/fresh_inputs_probe.json", help="JSON written here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("fresh_inputs_probe: needs a CUDA GPU (CUDA graphs); run it on the device", file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    parts = [Path(args.out).with_suffix(f".rank{n}.json") for n in range(args.processes)]
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=probe, args=(n, args.rounds, args.problems, str(part)))
                 for n, part in enumerate(parts)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    records, failed = [], []
    for process, part in zip(processes, parts):
        if process.exitcode == 0 and part.exists():
            records += json.loads(part.read_text())
            part.unlink()
        else:
            failed.append(process.exitcode)  # e.g. out of device memory: its captures are missing, not hidden
    print(f"{'variant':<14}{'captures':>10}{'first replay differs':>22}{'a later replay differs':>24}")
    summary = {"processes": args.processes, "failed_processes": failed, "variants": {}}
    for variant in VARIANTS:
        mine = [r["differing_fraction_per_replay"] for r in records if r["variant"] == variant]
        first, later = sum(d[0] > 0 for d in mine), sum(any(x > 0 for x in d[1:]) for d in mine)
        summary["variants"][variant] = {"captures": len(mine), "first_replay_differs": first, "later_replay_differs": later}
        print(f"{variant:<14}{len(mine):>10}{first:>22}{later:>24}")
    if failed:
        print(f"{len(failed)} of {args.processes} processes failed (exit codes {failed}); their captures are missing")
    Path(args.out).write_text(json.dumps({"summary": summary, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
