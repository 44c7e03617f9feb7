"""python scripts/plot_learning.py RUN_DIR [--out docs/results/learning]

Renders a learning run's curves as PNGs from its TensorBoard events (RUN/sft/tb, RUN/rl/tb), its
evaluation reports (RUN/evals/{test,heldout}_{sft,rl,sft_continued,rl_shuffled}[_greedy].json, written by
`kbench report --json`) and SFT probes (RUN/sft/probes.txt):
  sft_loss.png      SFT loss per step
  rl_reward.png     GRPO mean reward per step
  rl_rates.png      rollout correct, fast_1 and compile rates per step (training problems), and the control's
  rl_kl.png         KL to the reference (when the run logged one; the shuffled control's too) and the
                    engine/trainer logprob gap
  rl_entropy.png    the policy's entropy per GRPO step, and the shuffled control's
  tokens_per_s.png  generation and training tokens/s per phase
  sft_probe.png     held-out pass@k of the SFT probes per SFT step (where SFT stopped)
  test_over_training.png  test pass@1, sampled and greedy, after SFT, after each of GRPO's exports
                    (rl.export_hf_every) and at its end
  test.png, heldout.png  pass@1 correctness and fast_1 after SFT, after RL and for the controls run, on the
                    in-distribution test split and the unseen-pair split, 95% Wilson intervals
and summary.json with those numbers (keys test, heldout) and the stage seconds. Missing inputs are reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path


def scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the TensorBoard events under tb_dir -> [(step, value)], step-sorted."""
    from smart.tracking import read_scalars

    return {tag: sorted(values.items()) for tag, values in read_scalars(tb_dir).items()}


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial rate (well behaved at 0 and 1, unlike the normal one)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def heldout_numbers(report: dict) -> dict:
    """Sample-level correct and fast_1 rates (with intervals) from a `kbench report --json` document.
    Samples of one problem are not independent, so the intervals are optimistic; pass@k is per problem."""
    totals = report["summary"]["all"]
    n = int(totals["n_samples"])
    correct = int(totals["status_counts"].get("correct", 0))
    out = {"samples": n, "problems": totals["n_problems"], "correct": correct,
           "correct_rate": correct / n if n else 0.0, "correct_ci95": wilson(correct, n),
           "status_counts": totals["status_counts"], "pass_at_k": totals.get("pass_at_k", {}),
           "geomean_speedup": totals.get("geomean_speedup")}
    fast = (totals.get("fast_p") or {}).get("1")
    if isinstance(fast, (int, float)) and totals.get("n_correct_timed"):  # untimed (CPU) runs have no fast_1
        out |= {"fast_1": fast, "fast_1_ci95": wilson(int(round(fast * n)), n)}
    return out


def line_plot(path: Path, title: str, series: dict[str, list[tuple[int, float]]], ylabel: str) -> bool:
    import matplotlib.pyplot as plt

    series = {k: v for k, v in series.items() if v}
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, points in series.items():
        ax.plot([s for s, _ in points], [v for _, v in points], marker="o" if len(points) < 30 else None,
                markersize=3, label=label)
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


SPLIT_TITLES = {"test": "test split (new problems, training distribution)", "heldout": "unseen operator pairs"}


def heldout_plot(path: Path, numbers: dict[str, dict], split: str) -> bool:
    import matplotlib.pyplot as plt

    if not numbers:
        return False
    metrics = [("correct_rate", "correct_ci95", "pass@1 correct"), ("fast_1", "fast_1_ci95", "fast_1")]
    metrics = [m for m in metrics if any(m[0] in nums for nums in numbers.values())]  # fast_1 only when timed
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(numbers)
    for i, (phase, nums) in enumerate(numbers.items()):
        xs, ys, errs = [], [], [[], []]
        for j, (key, ci, _) in enumerate(metrics):
            if key in nums:
                xs.append(j + i * width)
                ys.append(nums[key])
                errs[0].append(nums[key] - nums[ci][0])
                errs[1].append(nums[ci][1] - nums[key])
        ax.bar(xs, ys, width, yerr=errs, capsize=4, label=f"{phase} (n={nums['samples']})")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))], [m[2] for m in metrics])
    ax.set(title=f"{SPLIT_TITLES[split]}, 95% Wilson intervals", ylabel="rate", ylim=(0, 1.15))
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def over_training(run: Path, rl_steps: int | None, suffix: str = "") -> list[list]:
    """[GRPO steps done, pass@1, Wilson low, high] on the test split: SFT at 0, GRPO's exports after N steps
    (rl.export_hf_every: evals/test_rl_stepN.json) and, when the step count is known, the final policy;
    suffix "_greedy" reads the greedy reports (test_sft_greedy.json, test_rl_stepN_greedy.json, ...)."""
    steps_of = re.compile(rf"test_rl_step(\d+){suffix}")
    reports = {0: run / "evals" / f"test_sft{suffix}.json"}
    reports |= {int(match.group(1)): f for f in (run / "evals").glob(f"test_rl_step*{suffix}.json")
                if (match := steps_of.fullmatch(f.stem))}
    if rl_steps:
        reports[rl_steps] = run / "evals" / f"test_rl{suffix}.json"
    points = []
    for steps, path in sorted(reports.items()):
        if path.is_file():
            numbers = heldout_numbers(json.loads(path.read_text()))
            points.append([steps, numbers["correct_rate"], *numbers["correct_ci95"]])
    return points


def over_training_plot(path: Path, sampled: list[list], greedy: list[list]) -> bool:
    import matplotlib.pyplot as plt

    if len(sampled) < 3:  # SFT and the final policy are test.png's bars already
        return False
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for points, label in ((sampled, "sampled, T=1"), (greedy, "greedy")):
        if points:
            steps, rates = [p[0] for p in points], [p[1] for p in points]
            below, above = [p[1] - p[2] for p in points], [p[3] - p[1] for p in points]
            ax.errorbar(steps, rates, yerr=[below, above], marker="o", capsize=4, label=label)
    ax.set(title="test pass@1 over GRPO, 95% Wilson intervals", xlabel="GRPO steps", ylabel="pass@1", ylim=(0, 1))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


PHASES = {"sft": "after SFT", "rl": "after RL", "sft_continued": "SFT continued (control)",
          "rl_shuffled": "RL, shuffled rewards (control)"}


def pick(tags: dict, *names: str) -> list[tuple[int, float]]:
    return next((tags[n] for n in names if n in tags), [])


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    ap = argparse.ArgumentParser(description="render a learning run's curves and held-out bars as PNGs",
                                 epilog="example: python scripts/plot_learning.py runs/learn_cpu --out docs/results/learning")
    ap.add_argument("run", help="run folder written by scripts/run_learning.sh")
    ap.add_argument("--out", default="", help="folder for the PNGs and summary.json (default RUN/plots)")
    args = ap.parse_args(argv)
    run = Path(args.run)
    if not run.is_dir():
        ap.error(f"{run} is not a folder; pass the RUN_DIR given to scripts/run_learning.sh")
    out = Path(args.out or run / "plots")
    out.mkdir(parents=True, exist_ok=True)
    sft, rl, shuffled = scalars(run / "sft" / "tb"), scalars(run / "rl" / "tb"), scalars(run / "rl_shuffled" / "tb")
    ablations = {d.name: scalars(d / "tb") for d in sorted(run.glob("rl_*")) if d.is_dir() and d.name != "rl_shuffled"}
    kl_tags = {t: v for t, v in rl.items() if "kl" in t.lower()}
    written, missing = [], []
    plots = {
        "sft_loss.png": ("SFT loss", {"train/loss": pick(sft, "train/loss")}, "loss"),
        "rl_reward.png": ("GRPO reward (training problems)", {"reward/mean": pick(rl, "reward/mean"),
                                                              "shuffled control": pick(shuffled, "reward/mean")}, "reward"),
        "rl_rates.png": ("GRPO rollouts (training problems)", {
            "correct": pick(rl, "eval/correct_rate"), "fast_1": pick(rl, "eval/fast_1_rate"),
            "correct, shuffled control": pick(shuffled, "eval/correct_rate"),
            "compiled": pick(rl, "eval/compile_rate"), "compiled, shuffled control": pick(shuffled, "eval/compile_rate"),
            **{f"correct, {name}": pick(tags, "eval/correct_rate") for name, tags in ablations.items()}},
            "rate"),
        "rl_kl.png": ("KL and logprob gap", {**kl_tags, "train/kl, shuffled control": pick(shuffled, "train/kl"),
                                             "engine-trainer |dlogp|": pick(rl, "train/rollout_logprob_abs_diff")},
                      "nats"),
        "rl_entropy.png": ("policy entropy (sampled tokens)", {"GRPO": pick(rl, "train/entropy"),
                                                              "shuffled control": pick(shuffled, "train/entropy")},
                           "nats a token"),
        "tokens_per_s.png": ("throughput per phase", {
            "RL generate": pick(rl, "perf/generate_tokens_per_s"), "RL train": pick(rl, "train/tokens_per_s"),
            "SFT train": pick(sft, "train/tokens_per_s")}, "tokens/s"),
    }
    for name, (title, series, ylabel) in plots.items():
        (written if line_plot(out / name, title, series, ylabel) else missing).append(name)
    probes_txt = run / "sft" / "probes.txt"
    probes = [(int(a), float(b)) for a, b in (line.split() for line in probes_txt.read_text().splitlines() if line.strip())] \
        if probes_txt.is_file() else []
    (written if line_plot(out / "sft_probe.png", "SFT held-out probe", {"pass@k": probes}, "pass@k") else missing).append(
        "sft_probe.png")
    by_split = {}
    for split in ("test", "heldout"):  # the in-distribution test split, and unseen operator pairs
        numbers = {}
        for phase, label in (PHASES | {name: f"RL, {name}" for name in ablations}).items():
            for suffix, kind in (("", ""), ("_greedy", ", greedy")):
                report = run / "evals" / f"{split}_{phase}{suffix}.json"
                if report.is_file():
                    numbers[label + kind] = heldout_numbers(json.loads(report.read_text()))
        if numbers or split == "heldout":
            by_split[split] = numbers
            (written if heldout_plot(out / f"{split}.png", numbers, split) else missing).append(f"{split}.png")
    rl_steps = max((step for step, _ in pick(rl, "eval/correct_rate")), default=-1) + 1 or None
    points, greedy_points = over_training(run, rl_steps), over_training(run, rl_steps, "_greedy")
    (written if over_training_plot(out / "test_over_training.png", points, greedy_points) else missing).append(
        "test_over_training.png")
    stages = run / "stage_seconds.txt"
    seconds = dict(line.split() for line in stages.read_text().splitlines() if line.strip()) if stages.is_file() else {}
    summary = {**by_split, "test_over_training": points, "test_greedy_over_training": greedy_points, "sft_probes": probes,
               "stage_seconds": {k: int(v) for k, v in seconds.items()}, "plots": written, "missing": missing}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {len(written)} plots to {out}" + (f"; no data for {', '.join(missing)}" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
