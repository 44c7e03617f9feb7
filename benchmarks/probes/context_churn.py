"""How fast processes can start and end CUDA contexts on one GPU, by hardware queues per context (GPU only).

    python benchmarks/probes/context_churn.py --out runs/probes/context_churn.json

Every candidate the evaluator runs starts a CUDA context in a fresh worker process and ends it when
the process is killed. This runs that cycle the way the evaluator does: `--loops` parent processes,
each with torch imported and CUDA not started (like the fork server), fork children one after another;
a child starts its context (the worker's blocking-sync flag, `torch.zeros` on the device), runs one
small kernel, says so through a pipe and waits to be killed. Per setting of CUDA_DEVICE_MAX_CONNECTIONS
(unset means the driver's default, 8), alone and beside `--load` processes that keep the GPU busy with
matrix products: cycles per second over all loops, and the median seconds from fork to context up
(start) and from SIGKILL to reaped (exit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LOAD = r"""
import sys, time, torch
x = torch.randn(2048, 2048, device="cuda")
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(4):
        x @ x
    torch.cuda.synchronize()
"""

LOOP = r"""
import ctypes, json, os, signal, sys, time
import torch  # imported, CUDA not started: children fork from here, as workers fork from the fork server

cycles, end = [], time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    read, write = os.pipe()
    forked = time.monotonic()
    pid = os.fork()
    if pid == 0:
        sys.excepthook = lambda *exc: (sys.__excepthook__(*exc), os._exit(1))
        cuda, dev = ctypes.CDLL("libcuda.so.1"), ctypes.c_int()
        cuda.cuInit(0)
        cuda.cuDeviceGet(ctypes.byref(dev), 0)
        cuda.cuDevicePrimaryCtxSetFlags_v2(dev, ctypes.c_uint(4))  # blocking sync, as the evaluator's workers
        torch.cuda.set_device(0)
        (torch.zeros(1 << 20, device="cuda") + 1).sum().item()
        os.write(write, b"up")
        signal.pause()
        os._exit(0)
    os.close(write)
    if os.read(read, 2) != b"up":  # the child died first: its traceback is on stderr
        sys.exit("a child could not start a CUDA context")
    up = time.monotonic()
    os.close(read)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    cycles.append((up - forked, time.monotonic() - up))
print(json.dumps(cycles))
"""


def churn(connections: str | None, loops: int, seconds: float, load: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    if connections:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = connections
    busy = [subprocess.Popen([sys.executable, "-c", LOAD, str(seconds + 30)], env=env) for _ in range(load)]
    try:
        if load:
            time.sleep(5)  # their contexts up and their products running
        parents = [subprocess.Popen([sys.executable, "-c", LOOP, str(seconds)], env=env, stdout=subprocess.PIPE,
                                    text=True) for _ in range(loops)]
        cycles = [c for p in parents for c in json.loads(p.communicate()[0] or "[]")]
    finally:
        for p in busy:
            p.kill()
            p.wait()
    if not cycles:
        raise SystemExit(f"no context started with CUDA_DEVICE_MAX_CONNECTIONS={connections}: is there a GPU?")
    return {"cycles": len(cycles), "cycles_per_s": round(len(cycles) / seconds, 2),
            "start_median_s": round(statistics.median(c[0] for c in cycles), 3),
            "exit_median_s": round(statistics.median(c[1] for c in cycles), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15.0, help="how long each setting runs")
    ap.add_argument("--loops", default="1,8", help="parent processes forking side by side, per run")
    ap.add_argument("--load", default="0,4", help="processes keeping the GPU busy, per run")
    ap.add_argument("--connections", default="default,1", help="CUDA_DEVICE_MAX_CONNECTIONS values (default: unset)")
    ap.add_argument("--out", default="runs/probes/context_churn.json")
    args = ap.parse_args()
    rows = []
    print(f"{'connections':>11} {'loops':>5} {'load':>4} {'cycles/s':>9} {'start s':>8} {'exit s':>7}")
    for load in map(int, args.load.split(",")):
        for loops in map(int, args.loops.split(",")):
            for connections in args.connections.split(","):
                found = churn(None if connections == "default" else connections, loops, args.seconds, load)
                rows.append({"connections": connections, "loops": loops, "load": load, **found})
                print(f"{connections:>11} {loops:>5} {load:>4} {found['cycles_per_s']:>9} "
                      f"{found['start_median_s']:>8} {found['exit_median_s']:>7}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"seconds": args.seconds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
