"""Generate a kernel for one problem with an LLM and evaluate it, showing every step.

    kbench run-one dataset_src=bundled level=1 problem_id=1 server_type=openai \
        model_name=Qwen/Qwen3-8B base_url=http://127.0.0.1:30000/v1 verbose=True
    python scripts/generate_and_eval_single_sample.py dataset_src=huggingface level=2 problem_id=19 ...

The candidate runs in the evaluator's sandboxed worker, never in this process.
"""

from __future__ import annotations

import dataclasses

from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from kbencheval.bench.common import cli_main, make_llm_client, require, resolve_devices, stdout
from kbencheval.config import ConfigError, load_config
from kbencheval.eval.result import EvalResult, Status

_STATUS_STYLE = {"correct": "bold green", "incorrect": "yellow", "rejected": "bold red"}


@dataclasses.dataclass
class RunOneConfig:
    dataset_src: str = "bundled"
    """bundled | local | huggingface"""
    dataset_path: str = ""
    """KernelBench folder (local) or dataset id (huggingface)."""
    level: int = 1
    problem_id: int = 1
    server_type: str = "openai"
    """openai | sglang | embedded"""
    model_name: str = ""
    base_url: str = ""
    api_key_env: str = ""
    """Environment variable holding the API key (server_type=openai); default OPENAI_API_KEY."""
    temperature: float = 0.0
    """0 = greedy, the usual choice for one sample."""
    top_p: float = 0.95
    max_tokens: int = 4096
    seed: int = 0
    num_samples: int = 1
    prompt_style: str = "one_shot"
    backend: str = "triton"
    precision: str = ""
    gpu_notes: str = ""
    device: str = "auto"
    """auto (first GPU, else CPU interpreter) | cpu | cuda | cuda:N"""
    trials: int = 0
    """Correctness trials (fresh seeded inputs each); 0 = the harness default."""
    timeout_s: float = 0.0
    """Evaluation limit in seconds; 0 = the harness default."""
    verbose: bool = False
    """Show the whole prompt and the evaluator's feedback and checks."""

    def validate(self) -> None:
        if self.num_samples < 1:
            raise ConfigError(f"num_samples must be >= 1, got {self.num_samples}")


def _clip(text: str, lines: int) -> str:
    rows = text.splitlines()
    return text if len(rows) <= lines else "\n".join(rows[:lines]) + f"\n... ({len(rows) - lines} more lines; verbose=True shows all)"


def show_prompt(messages: list[dict], verbose: bool) -> None:
    for m in messages:
        stdout.print(Panel(_clip(m["content"], 10**9 if verbose else 25), title=f"prompt: {m['role']}",
                           border_style="blue"))


def result_table(result: EvalResult, verbose: bool) -> Table:
    table = Table(show_header=False, title="EvalResult")
    table.add_column(style="bold")
    table.add_column()
    status = result.status.value
    table.add_row("status", f"[{_STATUS_STYLE.get(status, 'red')}]{status}[/]")
    table.add_row("compiled / correct", f"{result.compiled} / {result.correct}")
    if result.timing_meaningful and result.speedup is not None:
        table.add_row("speedup", f"{result.speedup:.3f}x")
        table.add_row("runtime", f"{result.runtime_us:.1f} us (reference {result.ref_runtime_us:.1f} us)")
    else:
        table.add_row("speedup", "not measured meaningfully on this device (CPU interpreter or not correct)")
    table.add_row("device / sandbox", f"{result.device} / {result.sandbox}")
    table.add_row("eval time", f"{result.eval_seconds:.1f} s")
    if result.error:
        table.add_row("error", result.error)
    if verbose:
        if result.feedback:
            table.add_row("feedback", result.feedback)
        for name, finding in result.checks.items():
            table.add_row(f"check {name}", str(finding))
    return table


def run_one(cfg: RunOneConfig) -> list[EvalResult]:
    from kbencheval.dataset import get_problem
    from kbencheval.eval.harness import EvalConfig, Evaluator
    from kbencheval.extract import extract_code
    from kbencheval.llm.base import SamplingParams
    from kbencheval.prompts import build_prompt

    problem = get_problem(cfg.dataset_src, cfg.level, cfg.problem_id, path=cfg.dataset_path or None)
    messages = build_prompt(problem.source, backend=cfg.backend, style=cfg.prompt_style,
                            precision=cfg.precision or None, gpu_notes=cfg.gpu_notes or None)
    stdout.rule(f"{problem.key}  ({cfg.dataset_src}, level {cfg.level})")
    show_prompt(messages, cfg.verbose)

    client = make_llm_client(cfg.server_type, cfg.model_name, cfg.base_url, cfg.api_key_env)
    try:
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_tokens,
                                n=cfg.num_samples, seed=cfg.seed)
        with stdout.status(f"generating {cfg.num_samples} sample(s) with {cfg.model_name} ({cfg.server_type})"):
            completions = client.chat([messages], params)[0]
    finally:
        client.close()

    device = resolve_devices(cfg.device)[0]
    overrides = {k: v for k, v in (("trials", cfg.trials), ("timeout_s", cfg.timeout_s)) if v}
    results = []
    with Evaluator(EvalConfig(device=device, **overrides)) as evaluator:
        for k, completion in enumerate(completions):
            stdout.rule(f"sample {k}")
            if completion.error:
                stdout.print(Panel(completion.error, title="request failed", border_style="red"))
                result = EvalResult(status=Status.FORMAT_ERROR, problem=problem.key,
                                    error=f"generation failed: {completion.error}", device=device)
            else:
                stdout.print(Panel(_clip(completion.text, 10**9 if cfg.verbose else 60),
                                   title=f"response ({completion.finish_reason or 'done'})", border_style="magenta"))
                code = extract_code(completion.text)
                if code:
                    stdout.print(Panel(Syntax(code, "python", line_numbers=True), title="extracted kernel"))
                else:
                    stdout.print("[red]no code block found in the response[/]")
                with stdout.status(f"evaluating on {device}"):
                    result = evaluator.evaluate(problem, completion.text, backend=cfg.backend)
            stdout.print(result_table(result, cfg.verbose))
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = load_config(RunOneConfig, None, argv or [])
        require(cfg.model_name, "set model_name=...: the served model id, or a local HF model for server_type=embedded")
        run_one(cfg)
        return 0

    return cli_main("run-one", body)
