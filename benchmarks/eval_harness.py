"""Benchmark the evaluator on a GPU: bundled-solution speedups, timing reproducibility, overhead, throughput.

    python benchmarks/eval_harness.py --device cuda --out benchmarks/results/eval_harness.json
    python benchmarks/eval_harness.py --device cuda --timing-mode events --out benchmarks/results/eval_harness_events.json
    python benchmarks/eval_harness.py --device cuda --evaluators-per-device 4 --out benchmarks/results/eval_harness_4w.json
    python benchmarks/eval_harness.py --device cpu --limit 3      # smoke run under the interpreter
    python benchmarks/eval_harness.py --device cuda --compare-kernelbench ~/KernelBench   # theirs beside ours

`--evaluators-per-device N` runs N Evaluators on the device from N threads: compile and correctness
overlap, timing is one at a time (kbencheval/eval/sharing/gate.py); the summary adds how long timings waited.
Each pass after the first hands out the problems that took longest before first (`--order suite`:
always the suite's order), as the reward pool does across RL steps.

`--timing-mode trusted` (the default) times the reference in the judge and the candidate as graph
replays on fresh inputs with outside bounds; `events` is the KernelBench-style eager mode. In trusted
mode the reference's timing runs in the judge, so it counts as harness overhead here.

Every bundled reference solution is evaluated twice (two passes, same process tree). Reported:
- speedup of each solution over the eager reference (median of interleaved CUDA-event timings);
- reproducibility: |speedup_pass1 - speedup_pass2| / speedup_pass1, median and p95 (target: median <= 1%);
- overhead per candidate: wall time of one evaluation minus the candidate's own work as the worker
  measured it (import + kernel compile + trials + timing loop). What remains is the harness: fork,
  CUDA context, judge reference and comparison, transfers, process cleanup (target <= 1.5 s);
- the cold-process cost it replaces: `python -c "import torch, triton"` plus first CUDA use;
- throughput: candidates evaluated per minute on this one device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernelbench_compare  # noqa: E402  (beside this file)
from kbencheval.dataset import load_bundled  # noqa: E402
from kbencheval.eval.trusted.harness import EvalConfig, start_evaluators  # noqa: E402
from kbencheval.eval.sharing import kernel_cache, launchers  # noqa: E402
from kbencheval.eval.config import device_memory_per_evaluator  # noqa: E402
from kbencheval.eval.sharing.schedule import EvalSeconds  # noqa: E402


def cold_start_seconds(device: str, runs: int = 3) -> float:
    touch = "torch.zeros(1, device='cuda'); torch.cuda.synchronize()" if device != "cpu" else "torch.zeros(1)"
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import torch, triton; {touch}"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else None


class GpuBusy:
    """nvidia-smi's utilization.gpu (the share of time a kernel ran), sampled every 100 ms during a pass:
    how much of the wall time the device computed at all. None without nvidia-smi."""

    def __init__(self, device: str):
        self.samples: list[list] = []  # [monotonic time read, percent]
        self.proc = None
        if device.startswith("cuda") and shutil.which("nvidia-smi"):
            index = device.split(":")[1] if ":" in device else "0"
            self.proc = subprocess.Popen(["nvidia-smi", "-i", index, "--query-gpu=utilization.gpu",
                                          "--format=csv,noheader,nounits", "-lms", "100"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append([round(time.monotonic(), 3), int(line)])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc:
            self.proc.kill()
            self.proc.wait()

    def mean(self) -> float | None:
        return round(statistics.fmean(u for _, u in self.samples), 1) if self.samples else None


def run_pass(evaluators: list, problems: list, rows: dict, name: str, meta: dict,
             history: EvalSeconds | None = None) -> None:
    """Every bundled solution once; one thread per Evaluator pulls from a shared queue, in the suite's
    order or, with `history`, the longest expected first (kbencheval/eval/sharing/schedule.py)."""
    t_pass = time.perf_counter()
    todo: queue.Queue = queue.Queue()
    order = history.longest_first([p.key for p in problems]) if history else range(len(problems))
    for i in order:
        todo.put(problems[i])

    def drain(ev) -> None:
        while True:
            try:
                p = todo.get_nowait()
            except queue.Empty:
                return
            t, t_mono = time.perf_counter(), time.monotonic()
            r = ev.evaluate(p, "```python\n" + p.solution_source + "```")
            wall = time.perf_counter() - t
            if history is not None:
                history.record(p.key, wall)
            phases = r.checks.get("phases_s", {})
            own = sum(phases.values())
            rows[p.key][name] = {
                "status": r.status.value, "error": r.error, "speedup": r.speedup,
                "runtime_us": r.runtime_us, "ref_runtime_us": r.ref_runtime_us,
                "runtime_p10_p90_us": [r.runtime_stats.p10_us, r.runtime_stats.p90_us] if r.runtime_stats else None,
                "wall_s": round(wall, 3), "candidate_work_s": round(own, 3), "overhead_s": round(wall - own, 3),
                "phases_s": phases, "timing_trust": r.checks.get("timing_trust"),
                "physical_floor_us": r.checks.get("physical_floor_us"),
                "timing_gate_wait_s": r.checks.get("device_gate", {}).get("timing", {}).get("wait_s"),
                # Per gate phase: seconds waited for the device and held; the exclusive "timing" holds
                # of all candidates added up bound the throughput of one device from above.
                "gate_s": {phase: {"wait_s": w.get("wait_s"), "held_s": w.get("held_s"), "holds": w.get("holds"),
                                   **{k: w[k] for k in ("ready_after_s", "blocked_by_gb") if k in w}}
                           for phase, w in r.checks.get("device_gate", {}).items() if "end" in w},
                "monotonic_span": [round(t_mono, 3), round(t_mono + wall, 3)],  # the clock of gate holds and GPU samples
                # Where the exclusive window goes: the rounds' wall clocks and event sums of both sides
                # (the rest of the window is messages and the bandwidth yardstick).
                "rounds_s": {key: round(sum(rnd[key] for rnd in r.checks.get("timing_rounds", [])), 4)
                             for key in ("ref_wall_s", "ref_events_s", "new_wall_s", "new_events_s")},
                "span_s": [round(t - t_pass, 3), round(t - t_pass + wall, 3)],  # when, within the pass
                "timed_iterations": r.runtime_stats.n if r.runtime_stats else None,
                "device_memory_gb": r.checks.get("device_memory_gb"),
                "device_gb": {"worker_peak": r.checks.get("worker_peak_gb"), "judge": r.checks.get("judge_reserved_gb")},
                "fresh_inputs": r.checks.get("fresh_inputs"),
                # Per protocol phase, seconds the harness waited on the worker and on the judge.
                "harness_s": r.checks.get("harness_s"),
                # Per phase, where the worker's and the judge's requests spent it (parts.Parts; breakdown --parts).
                "worker_parts_s": r.checks.get("worker_parts_s"), "judge_parts_s": r.checks.get("judge_parts_s"),
                # The worker's own account of its start (device init, lock-down, init) and first trial.
                "worker_start_s": r.checks.get("start_s"), "first_trial_s": r.checks.get("first_trials_s"),
                "first_trial_parts_s": r.checks.get("first_trial_parts_s"),
                "first_call_parts_s": r.checks.get("first_call_parts_s"),
                "precompile": r.checks.get("precompile"),
                "harness_restarted": r.checks.get("harness_restarted"),  # a fork server started again first
                "device_oom_retry": r.checks.get("device_oom_retry"),  # run again alone: its first run's error
            }
            meta.update(device=r.device, sandbox=r.sandbox)
            print(f"{name} {p.key:<32} {r.status.value:<13} speedup={r.speedup} wall={wall:.2f}s "
                  f"overhead={wall - own:.2f}s {r.error[:80]}", flush=True)

    threads = [threading.Thread(target=drain, args=(ev,)) for ev in evaluators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cpu_seconds() -> tuple[float, float, float]:
    """(busy, all) CPU seconds of the whole machine since boot (/proc/stat), and this process's own
    (every thread: the harness's Evaluators, watchdogs and gate polls)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    per_s = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    own = os.times()
    return (sum(ticks) - idle) / per_s, sum(ticks) / per_s, own.user + own.system


def run_passes(evaluators: list, problems: list, rows: dict, passes: int, device: str, order: str) -> tuple:
    """Every pass in turn: (wall seconds, mean GPU busy %, GPU busy samples, CPU use) per pass, and what
    the results said about the device and the sandbox. `order` "longest-first": each pass after the
    first starts the problems that took longest in the passes before."""
    pass_walls, gpu_busy, gpu_samples, cpu, meta = [], [], [], [], {}
    history = EvalSeconds() if order == "longest-first" else None
    for n in range(passes):
        t_pass, cpu_before = time.perf_counter(), cpu_seconds()
        with GpuBusy(device) as busy:
            run_pass(evaluators, problems, rows, f"pass{n + 1}", meta, history)
        pass_walls.append(time.perf_counter() - t_pass)
        busy_s, all_s, own_s = (after - before for after, before in zip(cpu_seconds(), cpu_before))
        cpu.append({"machine_busy_percent": round(100 * busy_s / max(all_s, 1e-9), 1),
                    "machine_busy_cores": round(busy_s / pass_walls[-1], 2), "harness_cpu_s": round(own_s, 2)})
        gpu_busy.append(busy.mean())
        gpu_samples.append(busy.samples)
    return pass_walls, gpu_busy, gpu_samples, cpu, meta


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first N problems (smoke runs)")
    ap.add_argument("--timing-mode", default="trusted", choices=["trusted", "events", "cuda_graph"])
    ap.add_argument("--evaluators-per-device", type=int, default=1,
                    help="Evaluators on the device at once (compile/correctness overlap, timing one at a time)")
    ap.add_argument("--min-iters", type=int, default=EvalConfig.min_iters,
                    help="trusted timing: iterations before it may stop early (= 100: always 100)")
    ap.add_argument("--target-rse", type=float, default=EvalConfig.timing_target_rse,
                    help="trusted timing: stop once the speedup's relative standard error is this (0: never early)")
    ap.add_argument("--order", default="longest-first", choices=["longest-first", "suite"],
                    help="the order each pass hands out candidates: after the first pass, the longest first "
                         "(by what the passes before took), or always the suite's")
    ap.add_argument("--compare-kernelbench", metavar="PATH", default="",
                    help="also run KernelBench's own harness (a local checkout) on the same candidates")
    ap.add_argument("--out", default="benchmarks/results/eval_harness.json")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    kb_root = kernelbench_compare.check_checkout(args.compare_kernelbench) if args.compare_kernelbench else None

    problems = [p for level in map(int, args.levels.split(",")) for p in load_bundled(level)]
    if args.limit:
        problems = problems[: args.limit]
    cold = cold_start_seconds(args.device)
    t = time.perf_counter()
    cfg = device_memory_per_evaluator(EvalConfig(device=args.device, timing_mode=args.timing_mode, min_iters=args.min_iters,
                                                 timing_target_rse=args.target_rse), args.evaluators_per_device)
    evaluators = start_evaluators(cfg, args.evaluators_per_device)
    startup = time.perf_counter() - t
    rows = {p.key: {"problem": p.key} for p in problems}
    try:
        pass_walls, gpu_busy, gpu_samples, cpu, meta = run_passes(evaluators, problems, rows, args.passes, args.device,
                                                                      args.order)
    finally:
        for ev in evaluators:
            ev.close()
    device_name, sandbox = meta["device"], meta["sandbox"]

    deltas, overheads = [], []
    for row in rows.values():
        runs = [row.get(f"pass{n + 1}") for n in range(args.passes)]
        overheads += [r["overhead_s"] for r in runs if r and r["status"] == "correct"]
        if args.passes >= 2 and all(r and r["speedup"] for r in runs[:2]):
            d = abs(runs[0]["speedup"] - runs[1]["speedup"]) / runs[0]["speedup"]
            row["rel_delta_speedup"] = round(d, 5)
            deltas.append(d)
    speedups = [r["pass1"]["speedup"] for r in rows.values() if r["pass1"]["speedup"]]
    waits = [r["pass1"]["timing_gate_wait_s"] for r in rows.values() if r["pass1"].get("timing_gate_wait_s") is not None]
    summary = {
        "device": device_name,
        "timing_mode": args.timing_mode,
        "evaluators_per_device": args.evaluators_per_device,
        "order": args.order,
        "timed_iterations": {"max": cfg.iters, "min": cfg.min_iters, "target_rse": cfg.timing_target_rse},
        "timing_gate_wait_median_s": statistics.median(waits) if waits else None,
        "eager_fallbacks": sum("cannot capture" in (r["pass1"].get("timing_trust") or "") for r in rows.values()),
        "sandbox": sandbox,
        "candidates_per_pass": len(problems),
        "correct_pass1": sum(r["pass1"]["status"] == "correct" for r in rows.values()),
        "geomean_speedup_pass1": (statistics.geometric_mean(speedups) if speedups else None),
        "reproducibility_median_rel_delta": statistics.median(deltas) if deltas else None,
        "reproducibility_p95_rel_delta": pct(deltas, 0.95),
        "overhead_median_s": statistics.median(overheads) if overheads else None,
        "overhead_p95_s": pct(overheads, 0.95),
        "cold_process_start_s": round(cold, 3),
        "evaluator_startup_s": round(startup, 3),
        "throughput_candidates_per_min": [round(60 * len(problems) / w, 2) for w in pass_walls],
        "gpu_busy_percent": gpu_busy,
        "cpu_per_pass": cpu,  # machine-wide busy share and cores, and the harness process's own CPU seconds
        "launchers_built": launchers.counts(),  # by the harness for later candidates (launchers.py)
        "kernels_compiled": kernel_cache.counts(),  # likewise, kernels from candidates' TTIR (kernel_cache.py)
        **per_pass_figures(rows, args.passes),
    }
    if kb_root is not None:
        summary |= compare_with_kernelbench(kb_root, problems, rows, args.device)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Compact: a pass's per-candidate records run to hundreds of kB, and the results live in the repository.
    out.write_text(json.dumps({"summary": summary, "problems": list(rows.values()), "gpu_samples": gpu_samples},
                              separators=(",", ":")))

    print_table(rows, summary)
    print(f"\nwrote {out}")
    return 0


def per_pass_figures(rows: dict, passes: int) -> dict:
    """Per pass: the exclusive timing windows (timing holds the device alone, so no number of
    Evaluators gets past 60 / mean hold per minute), what the rounds inside them took, how many
    iterations were timed and how many verdicts were correct."""
    runs = [[r[f"pass{n + 1}"] for r in rows.values() if f"pass{n + 1}" in r] for n in range(passes)]
    exclusive = [[run["gate_s"]["timing"]["held_s"] for run in pass_runs if "timing" in run["gate_s"]]
                 for pass_runs in runs]
    iterations = [[run["timed_iterations"] for run in pass_runs if run.get("timed_iterations")] for pass_runs in runs]
    return {
        "exclusive_timing_s_median": [statistics.median(v) if v else None for v in exclusive],
        "exclusive_timing_s_total": [round(sum(v), 2) for v in exclusive],
        "timed_iterations_median": [statistics.median(v) if v else None for v in iterations],
        "exclusive_rounds_s_total": [{key: round(sum(run["rounds_s"][key] for run in pass_runs), 2)
                                      for key in ("ref_wall_s", "ref_events_s", "new_wall_s", "new_events_s")}
                                     for pass_runs in runs],
        "device_correct_per_pass": [sum(run["status"] == "correct" for run in pass_runs) for pass_runs in runs],
    }


def compare_with_kernelbench(root: Path, problems: list, rows: dict, device: str) -> dict:
    """KernelBench's harness on the same solutions, one fresh process each; per-problem agreement."""
    t0 = time.perf_counter()
    for p in problems:
        kb = kernelbench_compare.evaluate(root, p.source, p.solution_source, device)
        kb["agreement"] = kernelbench_compare.agreement(rows[p.key]["pass1"]["speedup"], kb["speedup"])
        rows[p.key]["kernelbench"] = kb
        print(f"kernelbench {p.key:<32} correct={kb.get('correct')} speedup={kb['speedup']} wall={kb['wall_s']:.1f}s "
              f"ours/theirs={kb['agreement']} {kb['error']}", flush=True)
    wall = time.perf_counter() - t0
    ratios = [r["kernelbench"]["agreement"] for r in rows.values() if r["kernelbench"]["agreement"]]
    return {"kernelbench_correct": sum(bool(r["kernelbench"].get("correct")) for r in rows.values()),
            "kernelbench_candidates_per_min": round(60 * len(problems) / wall, 2),
            "speedup_agreement_median": statistics.median(ratios) if ratios else None,
            "speedup_agreement_range": [min(ratios), max(ratios)] if ratios else None}


def print_table(rows: dict, summary: dict) -> None:
    print(f"\n{'problem':<32} {'ref µs':>10} {'kernel µs':>10} {'speedup':>8} {'Δ/speedup':>10} {'overhead s':>10}")
    for row in rows.values():
        p1 = row["pass1"]
        fmt = lambda v, f: (f.format(v) if v is not None else "-")  # noqa: E731
        print(f"{row['problem']:<32} {fmt(p1['ref_runtime_us'], '{:.1f}'):>10} {fmt(p1['runtime_us'], '{:.1f}'):>10} "
              f"{fmt(p1['speedup'], '{:.3f}'):>8} {fmt(row.get('rel_delta_speedup'), '{:.2%}'):>10} "
              f"{p1['overhead_s']:>10.2f}  {p1['status'] if p1['status'] != 'correct' else ''}")
    print()
    for k, v in summary.items():
        print(f"{k:<36} {v}")


if __name__ == "__main__":
    sys.exit(main())
