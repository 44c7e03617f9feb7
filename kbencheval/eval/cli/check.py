"""`kbench check`: evaluate one candidate against one problem.

    kbench check --ref kbencheval/problems/level1/1_ReLU.py --kernel my_relu.py --device cpu --json
    kbench check --level 1 --problem-id 1 --kernel my_relu.py            # bundled suite
    kbench check --dataset-src local --dataset-path ~/KernelBench --level 1 --problem-id 19 --kernel k.py
    kbench check --ref p.py --kernel k.py trials=3 timing_mode=cuda_graph   # any EvalConfig key=value

A candidate that cannot run (no code, no ModelNew, a syntax error, a static violation) gets its verdict
at once, without an evaluator. When `kbench serve-eval` answers on the default socket for the device
(or `--socket`) with the same EvalConfig, the warm server evaluates (checks["served_by"] says so);
otherwise a local Evaluator does (after one line on stderr saying why, unless no server runs at the
default socket: say `--verbose` to hear that too). `--no-server` always evaluates locally.

Exit status 0 whenever a verdict was reached (even for crashing, hanging or cheating candidates);
2 with one line on stderr for bad arguments, an unreadable problem or a device torch cannot use.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kbencheval.config import ConfigError, apply_overrides
from kbencheval.dataset import ProblemError, get_problem, load_problem_file
from kbencheval.eval.config import EvalConfig, check_device
from kbencheval.eval.cli.client import request_eval
from kbencheval.eval.cli.service import ServiceUnavailable, default_socket_path, private_dir


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kbench check", description="Evaluate one candidate kernel.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog="example: kbench check --level 1 --problem-id 1 --kernel my_relu.py --json trials=3  "
                                       "(any EvalConfig key=value; `kbench run-one --help` lists them)")
    p.add_argument("--ref", metavar="PATH", help="problem file (KernelBench format)")
    p.add_argument("--kernel", metavar="PATH", required=True,
                   help="candidate file defining ModelNew: code (.py) or raw LLM text (any other suffix)")
    p.add_argument("--device", metavar="STR", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--backend", default="triton", choices=["triton", "cuda"], help="kernel language")
    p.add_argument("--json", action="store_true", help="print only the EvalResult JSON")
    p.add_argument("--dataset-src", default="bundled", choices=["bundled", "local", "huggingface"],
                   help="with --level/--problem-id: where the problem comes from")
    p.add_argument("--dataset-path", metavar="STR", default=None, help="local KernelBench folder or HF dataset id")
    p.add_argument("--level", metavar="INT", type=int, help="problem level (instead of --ref)")
    p.add_argument("--problem-id", metavar="INT", type=int, help="problem id within --level")
    p.add_argument("--socket", metavar="PATH", default=None,
                   help="a `kbench serve-eval` socket; default: the per-user one for --device")
    p.add_argument("--no-server", action="store_true", help="evaluate locally even when a server answers")
    p.add_argument("--server-wait", metavar="SECONDS", type=float, default=600.0,
                   help="longest wait for a turn at a busy server before evaluating locally")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="say why no server was used, and list every sandbox layer")
    p.add_argument("overrides", nargs="*", help="EvalConfig key=value overrides")
    return p


def _served(args, cfg: EvalConfig, problem, text: str):
    """The server's verdict, or None after one stderr line saying why it is not used."""
    path = Path(args.socket) if args.socket else default_socket_path(cfg.device)
    try:
        if not args.socket and path.parent.exists():
            private_dir(path.parent, create=False)
        return request_eval(path, problem, text, cfg, wait_s=args.server_wait)
    except ServiceUnavailable as e:
        start = " ".join(["kbench serve-eval", "--device", cfg.device]
                         + (["--socket", str(path)] if args.socket else [])
                         + ([f"backend={cfg.backend}"] if cfg.backend != "triton" else []) + list(args.overrides))
        none_runs = str(e).startswith("no evaluation server")
        if args.socket or args.verbose or not none_runs:  # no server where none was asked for is the usual case
            hint = f" (start one with `{start}`)" if none_runs else ""
            print(f"kbench check: {e}{hint}; evaluating locally", file=sys.stderr)
        return None


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.ref and (args.level is not None or args.problem_id is not None):
            raise ProblemError("name the problem once: --ref FILE, or --level L --problem-id N (not both)")
        if args.ref:
            problem = load_problem_file(args.ref)
        elif args.level is not None and args.problem_id is not None:
            problem = get_problem(args.dataset_src, args.level, args.problem_id, path=args.dataset_path)
        else:
            raise ProblemError("name the problem: --ref FILE, or --level L --problem-id N [--dataset-src ...]")
        kernel_path = Path(args.kernel)
        if not kernel_path.is_file():
            raise ProblemError(f"candidate file {kernel_path} does not exist")
        text = kernel_path.read_text(errors="replace")
        cfg = apply_overrides(EvalConfig(device=args.device, backend=args.backend), args.overrides)
        if args.server_wait < 0:
            raise ValueError(f"--server-wait {args.server_wait:g}: give the seconds to wait for a server, 0 or more")
        check_device(cfg.device)  # here too: a candidate that cannot run never reaches the Evaluator's check
    except (ProblemError, ConfigError, ValueError) as e:
        print(f"kbench check: {e}", file=sys.stderr)
        return 2
    result = _screened(cfg, problem, text, is_code=kernel_path.suffix == ".py")
    if result is None and not args.no_server:
        result = _served(args, cfg, problem, text)
    if result is None:
        from kbencheval.eval.trusted.harness import Evaluator, HarnessError

        try:
            with Evaluator(cfg, hide_paths=[args.ref] if args.ref else []) as ev:
                result = ev.evaluate(problem, text)
        except HarnessError as e:
            print(f"kbench check: the harness could not run: {e}", file=sys.stderr)
            return 3
    if args.json:
        print(result.to_json())
    else:
        print_human(result, args.verbose)
    return 0


def _screened(cfg: EvalConfig, problem, text: str, is_code: bool):
    """The verdict of a candidate that cannot run, reached without an evaluator; None if it may run."""
    from kbencheval.eval.trusted.screen import screen
    from kbencheval.eval.result import feedback_text

    _, _, result = screen(text, cfg.backend, static_checks=cfg.static_checks, is_code=is_code)
    if result is not None:
        result.problem, result.device = problem.key, cfg.device_index
        result.feedback = feedback_text(result)
    return result


def print_human(result, verbose: bool = False) -> None:
    """The table `kbench check` prints for one verdict (with its timing-mode label)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    colour = "green" if result.correct else "red"
    console.print(f"[bold {colour}]{result.status.value}[/] {result.problem} on {result.device}")
    if result.error:
        console.print(f"error: {result.error}")
    if result.timing_meaningful:
        table = Table("model", "median µs", "p10 µs", "p90 µs", "n")
        for name, stats in (("reference", result.ref_runtime_stats), ("candidate", result.runtime_stats)):
            table.add_row(name, f"{stats.median_us:.1f}", f"{stats.p10_us:.1f}", f"{stats.p90_us:.1f}", str(stats.n))
        console.print(table)
        console.print(f"speedup: [bold]{result.speedup:.3f}x[/]")
    elif result.correct:
        console.print("timing: not meaningful on this device (Triton interpreter)")
    grade = result.checks.get("timing_mode")
    if isinstance(grade, dict) and not grade.get("reward_grade", True):
        console.print(f"[yellow]timing_mode={grade.get('mode')}: comparison-only, not reward-grade (the candidate's "
                      "worker timed itself); rewards use timing_mode=trusted[/]")
    missing = [layer.split(":")[0].removeprefix("missing ") for layer in result.sandbox if layer.startswith("missing ")]
    if verbose:
        console.print(f"sandbox: {', '.join(result.sandbox)}")
    elif result.sandbox:  # the JSON and --verbose keep the whole record
        console.print(f"sandbox: {len(result.sandbox) - len(missing)} layers"
                      + (f", missing {', '.join(missing)}" if missing else "") + " (--verbose lists them)")
    if weaker := result.checks.get("sandbox_weaker"):
        console.print(f"[yellow]weaker sandbox accepted ({weaker.get('by')}): missing "
                      f"{', '.join(weaker.get('accepted_missing', []))}[/]")
    if "cpu_verdict" in result.checks:
        console.print(f"on the CPU: {result.checks['cpu_verdict']}")
    if "served_by" in result.checks:
        served = result.checks["served_by"]
        console.print(f"served by kbench serve-eval (pid {served['pid']}) at {served['socket']}")
