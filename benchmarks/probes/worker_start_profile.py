"""What a candidate worker's start costs, step by step, in a child forked as the fork server forks it.

    python benchmarks/probes/worker_start_profile.py --out runs/probes/worker_start_profile.json

The parent imports what the fork server preloads (torch, triton, the worker module); the child then
times each step a worker takes before the candidate is imported: CUDA context (on a GPU), the launch
tracker (which wraps `torch.utils.cpp_extension.load_inline`), the problem module, the pinned flags,
the tripwires' baseline and the audit hook. The launch tracker's step is mostly importing
`torch.utils.cpp_extension`; the parent must not import it: a child forked after that import cannot
initialise CUDA (docs/history/evaluator-performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def child_steps(device: str) -> dict:
    """Seconds per start step, in this (forked) process."""
    import torch

    from kbencheval.dataset import load_bundled
    from kbencheval.eval.untrusted.audit import install_for_worker
    from kbencheval.eval.contract.inputs import load_problem_module, pin_global_flags
    from kbencheval.eval.untrusted.recorders import LaunchTracker
    from kbencheval.eval.untrusted.tripwires import Tripwires

    problem = load_bundled(1)[0]
    steps = [("launch_tracker", lambda: LaunchTracker().install()),
             ("problem_module", lambda: load_problem_module(problem.source, {})),
             ("pinned_flags", pin_global_flags),
             ("tripwires", lambda: Tripwires(LaunchTracker(), pin_global_flags(), set())),
             ("audit_hook", lambda: install_for_worker(tempfile.mkdtemp(), os.devnull))]
    if device.startswith("cuda"):
        steps.insert(0, ("cuda_context", lambda: (torch.cuda.set_device(device), torch.zeros(1, device=device))))
    times = {}
    for name, step in steps:
        clock = time.perf_counter()
        step()
        times[name] = round(time.perf_counter() - clock, 4)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", default="runs/probes/worker_start_profile.json")
    args = parser.parse_args()
    import torch
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import kbencheval.eval.untrusted.worker  # noqa: F401
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("no GPU here: pass --device cpu, or run it on the GPU machine")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # CUDA must not be initialised before the fork, as in the fork server
        os.close(read)
        os.write(write, json.dumps(child_steps(args.device)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        steps = json.loads(pipe.read())
    os.waitpid(pid, 0)
    result = {"device": args.device, "steps_s": steps}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{'step':<18}{'seconds':>9}")
    for name, seconds in steps.items():
        print(f"{name:<18}{seconds:9.3f}")
    print(f"{'all':<18}{sum(steps.values()):9.3f}")


if __name__ == "__main__":
    main()
