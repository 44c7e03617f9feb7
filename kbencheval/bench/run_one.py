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
from kbencheval.bench.config import EVAL_ALIASES, ClientConfig, DatasetConfig, eval_config_field, load_cli_config
from kbencheval.config import ConfigError
from kbencheval.eval import EvalConfig
from kbencheval.eval import EvalResult, Status

_STATUS_STYLE = {"correct": "bold green", "incorrect": "yellow", "rejected": "bold red"}


@dataclasses.dataclass(kw_only=True)
class RunOneConfig(ClientConfig, DatasetConfig):
    problem_id: int = 1
    temperature: float = 0.0
    """0 = greedy, the usual choice for one sample."""
    num_samples: int = 1
    prompt_style: str = "one_shot"
    """zero_shot | one_shot | few_shot | raicl (alias prompt_option)"""
    raicl_index: str = ""
    """prompt_style=raicl: index folder from `kbench rag build`."""
    raicl_k: int = 2
    raicl_model: str = ""
    """prompt_style=raicl: embedding model the index must have been built with; "" = the index's own."""
    backend: str = "triton"
    precision: str = ""
    gpu_notes: str = ""
    device: str = "auto"
    """auto (first GPU, else CPU interpreter) | cpu | cuda | cuda:N: where the evaluator runs."""
    verbose: bool = False
    """Show the whole prompt and the evaluator's feedback and checks."""
    eval: EvalConfig = eval_config_field()
    """The evaluator (kbencheval.eval.trusted.harness.EvalConfig): eval.trials=3 eval.timing_mode=cuda_graph ..."""

    def validate(self) -> None:
        DatasetConfig.validate(self)
        if self.num_samples < 1:
            raise ConfigError(f"num_samples must be >= 1, got {self.num_samples}")


USAGE = "kbench run-one [key=value ...]   (also scripts/generate_and_eval_single_sample.py)"
EXAMPLE = ("kbench run-one dataset_src=bundled level=1 problem_id=1 server_type=openai "
           "base_url=http://127.0.0.1:30000/v1 model_name=my-model eval.trials=3")


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
    table.add_row("device / sandbox", f"{result.device} / {', '.join(result.sandbox)}")
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
    from kbencheval.bench.generate import prompt_builder_for
    from kbencheval.dataset import get_problem
    from kbencheval.eval import Evaluator
    from kbencheval.extract import extract_code
    from kbencheval.llm.base import SamplingParams

    problem = get_problem(cfg.dataset_src, cfg.level, cfg.problem_id, path=cfg.dataset_path or None)
    messages = prompt_builder_for(cfg)(problem.source)
    stdout.rule(f"{problem.key}  ({cfg.dataset_src}, level {cfg.level})")
    show_prompt(messages, cfg.verbose)

    client = make_llm_client(cfg.server_type, cfg.model_name, cfg.base_url, cfg.api_key_env, cfg.engine_device,
                                 cfg.engine_dtype)
    try:
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_tokens,
                                n=cfg.num_samples, seed=cfg.seed)
        with stdout.status(f"generating {cfg.num_samples} sample(s) with {cfg.model_name} ({cfg.server_type})"):
            completions = client.chat([messages], params)[0]
    finally:
        client.close()

    device = resolve_devices(cfg.device)[0]
    results = []
    with Evaluator(dataclasses.replace(cfg.eval, device=device)) as evaluator:
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
        cfg = load_cli_config(RunOneConfig, list(argv or []), USAGE, EXAMPLE,
                              {**EVAL_ALIASES, "prompt_option": "prompt_style"})
        if cfg is None:  # --help
            return 0
        require(cfg.model_name, "set model_name=...: the served model id, or a local HF model for server_type=embedded")
        run_one(cfg)
        return 0

    return cli_main("run-one", body)
