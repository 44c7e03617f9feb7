"""What the device gate's ledger counts against what the GPU really holds, sampled while a command runs.

    python benchmarks/probes/ledger_vs_device_memory.py --out runs/probes/ledger_gap.json -- \
        python benchmarks/eval_harness.py --device cuda --evaluators-per-device 8

Every --interval seconds: the GPU's used memory (nvidia-smi) and the ledger's held, standing and early
bytes (gate.DeviceGate.reserved). A positive gap is memory that no reservation accounts for (judges preparing
at a pass's start, before any reservation); a negative one is reserved but unused. Prints a table
and writes the summary and every sample as JSON. NVIDIA only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kbencheval.eval.sharing.gate import DeviceGate  # noqa: E402


def used_gb(index: str) -> float:
    out = subprocess.run(["nvidia-smi", "-i", index, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    return int(out.split()[0]) / 1024  # MiB


def sample(gate: DeviceGate, index: str) -> dict:
    row = {"t": round(time.monotonic(), 3), "used_gb": round(used_gb(index), 2), **gate.counted_gb()}
    row["gap_gb"] = round(row["used_gb"] - row["held_gb"] - row["standing_gb"] - row["early_gb"], 2)
    return row


def summarize(rows: list[dict]) -> dict:
    # A whole-device reservation (a candidate re-run alone) is not a memory figure: left out of the gaps.
    counted = [r for r in rows if r["held_gb"] < 1e6]
    gaps = sorted(r["gap_gb"] for r in counted)
    if not gaps:
        return {"samples": len(rows)}
    worst = max(counted, key=lambda r: r["gap_gb"])
    return {"samples": len(rows), "used_max_gb": max(r["used_gb"] for r in rows),
            "gap_median_gb": statistics.median(gaps), "gap_p90_gb": gaps[int(0.9 * (len(gaps) - 1))],
            "gap_max_gb": gaps[-1], "gap_max_at_s": round(worst["t"] - rows[0]["t"], 2), "at_gap_max": worst,
            "alone_samples": len(rows) - len(counted)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda:0", help="the GPU whose gate and memory are sampled")
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    ap.add_argument("--out", default="runs/probes/ledger_vs_device_memory.json")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run while sampling")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.interval <= 0:
        ap.error(f"--interval {args.interval:g}: give a positive number of seconds between samples")
    if not command:
        ap.error("give the command to run after --, e.g. -- python benchmarks/eval_harness.py --device cuda")
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: this samples an NVIDIA GPU's memory; run it on a machine with one", file=sys.stderr)
        return 2
    index = args.device.partition(":")[2] or "0"
    gate, rows, done = DeviceGate(args.device), [], threading.Event()

    def sampler() -> None:
        while not done.is_set():
            t = time.monotonic()
            try:
                rows.append(sample(gate, index))
            except (subprocess.SubprocessError, OSError, ValueError, IndexError):
                pass  # one missed sample; the next one comes
            done.wait(max(0.0, args.interval - (time.monotonic() - t)))

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        rc = subprocess.run(command).returncode
    finally:
        done.set()
        thread.join(10)
    summary = {"command": command, "returncode": rc, **summarize(rows)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "samples": rows}, indent=1))
    for key, value in summary.items():
        if key not in ("command", "at_gap_max"):
            print(f"{key:<16} {value}")
    print(f"at the largest gap: {summary.get('at_gap_max')}\nwrote {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
