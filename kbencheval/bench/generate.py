"""Generate N samples per problem into runs/<name>/ (resumable: existing sample files are kept).

    kbench generate run_name=qwen_l1 dataset_src=bundled level=1 num_samples=4 \
        server_type=openai model_name=Qwen/Qwen3-8B base_url=http://127.0.0.1:30000/v1
    kbench generate run_name=tiny level=1 subset=[1,2,3] server_type=embedded model_name=/tmp/tiny

Sample k of a problem is requested with seed + k, so a resumed run draws what a fresh one would have.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from kbencheval.bench.common import cli_main, console, make_llm_client, make_progress, now_iso, require
from kbencheval.bench.store import (
    MANIFEST,
    Generation,
    RunError,
    generation_path,
    read_json,
    run_dir,
    write_json_atomic,
)
from kbencheval.bench.config import ClientConfig, DatasetConfig, load_cli_config
from kbencheval.config import ConfigError, to_dict
from kbencheval.dataset import Problem, load_problems


@dataclasses.dataclass(kw_only=True)
class GenerateConfig(ClientConfig, DatasetConfig):
    run_name: str = ""
    """Folder name under runs_dir; rerun with the same name to resume."""
    runs_dir: str = "runs"
    subset: list[int] = dataclasses.field(default_factory=list)
    """Problem ids to generate for, e.g. subset=[1,2,3]; empty means the whole level."""
    problem_range: list[int] = dataclasses.field(default_factory=list)
    """[first, last] problem ids, inclusive, e.g. problem_range=[1,20]."""
    num_samples: int = 1
    server_type: str = "openai"
    """openai | sglang | embedded | reference (the bundled reference solutions, as a baseline run), or a
    KernelBench preset: together | deepseek | fireworks | anthropic | google | local"""
    prompt_style: str = "one_shot"
    """zero_shot | one_shot | few_shot | raicl (examples retrieved from raicl_index; alias prompt_option)"""
    raicl_index: str = ""
    """prompt_style=raicl: index folder from `kbench rag build`."""
    raicl_k: int = 2
    """prompt_style=raicl: retrieved examples per prompt."""
    raicl_model: str = ""
    """prompt_style=raicl: embedding model the index must have been built with; "" = the index's own."""
    backend: str = "triton"
    precision: str = ""
    """Optional precision note for the prompt (fp32, bf16, ...)."""
    gpu_notes: str = ""
    """Optional hardware note for the prompt."""
    concurrency: int = 0
    """chat() calls in flight; 0 = 8 for HTTP servers, 1 for embedded."""
    batch_size: int = 0
    """Conversations per chat() call; 0 = 1 for HTTP servers (no batch waits on its slowest), 8 for embedded."""
    verbose: bool = False

    def validate(self) -> None:
        DatasetConfig.validate(self)
        if self.num_samples < 1:
            raise ConfigError(f"num_samples must be >= 1, got {self.num_samples}")
        if self.problem_range and len(self.problem_range) != 2:
            raise ConfigError(f"problem_range takes [first, last], got {self.problem_range}")
        if self.subset and self.problem_range:
            raise ConfigError("give subset=[...] or problem_range=[first,last], not both")
        if self.raicl_k < 1:
            raise ConfigError(f"raicl_k must be >= 1, got {self.raicl_k}")


PROMPT_ALIASES = {"prompt_option": "prompt_style"}  # KernelBench's name

USAGE = "kbench generate run_name=NAME [key=value ...]   (also scripts/generate_samples.py)"
EXAMPLE = ("kbench generate run_name=qwen_l1 level=1 num_samples=4 server_type=openai "
           "model_name=Qwen/Qwen3-8B base_url=http://127.0.0.1:30000/v1")

# Changing one of these mid-run would mix two experiments in one folder (adding a level or problems is fine).
_SAME_RUN_KEYS = ("dataset_src", "dataset_path", "server_type", "model_name", "prompt_style", "backend",
                  "precision", "gpu_notes", "temperature", "top_p", "max_tokens", "seed", "raicl_index", "raicl_k",
                  "engine_dtype")


def select_problems(cfg: GenerateConfig) -> list[Problem]:
    problems = load_problems(cfg.dataset_src, cfg.level, path=cfg.dataset_path or None)
    if cfg.subset:
        by_id = {p.problem_id: p for p in problems}
        missing = [i for i in cfg.subset if i not in by_id]
        if missing:
            raise ConfigError(f"subset names problem ids {missing} that level {cfg.level} of {cfg.dataset_src} lacks")
        return [by_id[i] for i in cfg.subset]
    if cfg.problem_range:
        first, last = cfg.problem_range
        problems = [p for p in problems if first <= p.problem_id <= last]
    if not problems:
        raise ConfigError(f"no problems selected from level {cfg.level} of {cfg.dataset_src}; check subset/problem_range")
    return problems


def problem_entry(p: Problem) -> dict:
    return {"key": p.key, "level": p.level, "problem_id": p.problem_id, "name": p.name, "source_hash": p.source_hash}


def write_manifest(run: Path, cfg: GenerateConfig, problems: list[Problem]) -> None:
    """Create the manifest, or extend it on resume after checking the run is the same experiment."""
    path = run / MANIFEST
    entries = {p.key: problem_entry(p) for p in problems}
    created = now_iso()
    if path.exists():
        old = read_json(path)
        for key in _SAME_RUN_KEYS:
            before = old["config"].get(key, getattr(GenerateConfig(), key))  # runs older than the key: its default
            if before != getattr(cfg, key):
                raise RunError(
                    f"run {cfg.run_name} was generated with {key}={before!r}, not "
                    f"{getattr(cfg, key)!r}; pick a new run_name or delete {run}"
                )
        for entry in old["problems"]:
            if entry["key"] in entries and entries[entry["key"]]["source_hash"] != entry["source_hash"]:
                raise RunError(f"problem {entry['key']} changed since run {cfg.run_name} started; use a new run_name")
            entries.setdefault(entry["key"], entry)
        created = old.get("created", created)
    write_json_atomic(path, {
        "run_name": cfg.run_name,
        "created": created,
        "updated": now_iso(),
        "model": cfg.model_name,
        "server_type": cfg.server_type,
        "prompt_style": cfg.prompt_style,
        "backend": cfg.backend,
        "config": to_dict(cfg),
        "problems": sorted(entries.values(), key=lambda e: (e["level"], e["problem_id"], e["key"])),
    })


def missing_runs(run: Path, key: str, num_samples: int) -> list[tuple[int, int]]:
    """Contiguous (first_sample, count) stretches whose sample files do not exist yet."""
    stretches, start = [], None
    for k in range(num_samples + 1):
        absent = k < num_samples and not generation_path(run, key, k).exists()
        if absent and start is None:
            start = k
        elif not absent and start is not None:
            stretches.append((start, k - start))
            start = None
    return stretches


def prompt_builder_for(cfg) -> Callable[[str], list[dict]]:
    """The prompt function of a generate/run-one config (opens the raicl index once)."""
    from kbencheval.prompts import prompt_builder

    return prompt_builder(backend=cfg.backend, style=cfg.prompt_style, precision=cfg.precision or None,
                          gpu_notes=cfg.gpu_notes or None, raicl_index=cfg.raicl_index, raicl_k=cfg.raicl_k,
                          raicl_model=cfg.raicl_model)


def completion_extra(c) -> dict:
    extra = {"finish_reason": getattr(c, "finish_reason", "")}
    if getattr(c, "token_ids", None) is not None:
        extra["completion_tokens"] = len(c.token_ids)
    return extra


class ReferenceClient:
    """Answers each prompt with the problem's bundled reference solution in a ```python fence.

    Evaluating such a run checks the harness and the machine, and gives the baseline report."""

    def __init__(self, problems_by_prompt: dict[str, Problem]):
        self.problems_by_prompt = problems_by_prompt

    def chat(self, messages_batch, params):
        from kbencheval.llm.base import Completion

        out = []
        for messages in messages_batch:
            p = self.problems_by_prompt[messages[-1]["content"]]
            c = (Completion(text=f"```python\n{p.solution_source}```\n", finish_reason="stop") if p.solution_source
                 else Completion(text="", error=f"no reference solution for {p.key}; only the bundled suite has them"))
            out.append([c] * params.n)
        return out

    def close(self) -> None:
        pass


def generate(cfg: GenerateConfig) -> dict:
    """Fill runs/<name>/generations; returns counts {"written", "skipped", "failed"}."""
    from kbencheval.llm.base import SamplingParams

    run = run_dir(cfg.runs_dir, cfg.run_name)
    problems = select_problems(cfg)
    write_manifest(run, cfg, problems)
    build = prompt_builder_for(cfg)
    messages = {p.key: build(p.source) for p in problems}

    # Work = (problem, first sample, count); items with the same (first, count) share seeds, so they batch.
    groups: dict[tuple[int, int], list[Problem]] = {}
    for p in problems:
        for first, count in missing_runs(run, p.key, cfg.num_samples):
            groups.setdefault((first, count), []).append(p)
    embedded = cfg.server_type == "embedded"
    batch_size = cfg.batch_size or (8 if embedded else 1)
    calls = [((first, count), ps[i: i + batch_size])
             for (first, count), ps in groups.items() for i in range(0, len(ps), batch_size)]
    total = sum(count * len(ps) for (_, count), ps in calls)
    counts = {"written": 0, "skipped": len(problems) * cfg.num_samples - total, "failed": 0}
    if total == 0:
        console.print(f"[green]{cfg.run_name}: all {counts['skipped']} samples already generated[/]")
        return counts

    if cfg.server_type == "reference":
        client = ReferenceClient({messages[p.key][-1]["content"]: p for p in problems})
    else:
        client = make_llm_client(cfg.server_type, cfg.model_name, cfg.base_url, cfg.api_key_env, cfg.engine_device,
                                 cfg.engine_dtype)

    def one_call(first: int, count: int, batch: list[Problem]) -> list[Generation]:
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_tokens,
                                n=count, seed=cfg.seed + first)
        outputs = client.chat([messages[p.key] for p in batch], params)
        gens = []
        for p, completions in zip(batch, outputs):
            for j, c in enumerate(completions[:count]):
                gens.append(Generation(problem_key=p.key, level=p.level, problem_id=p.problem_id, sample=first + j,
                                       messages=messages[p.key], text=c.text or "", error=c.error or "",
                                       model=cfg.model_name, created=now_iso(), extra=completion_extra(c)))
            if len(completions) < count:  # a client that returned fewer than n: record the gap, do not crash
                for j in range(len(completions), count):
                    gens.append(Generation(problem_key=p.key, level=p.level, problem_id=p.problem_id,
                                           sample=first + j, messages=messages[p.key], model=cfg.model_name,
                                           error=f"client returned {len(completions)} of {count} completions",
                                           created=now_iso()))
        return gens

    try:
        with make_progress() as progress, ThreadPoolExecutor(cfg.concurrency or (1 if embedded else 8)) as pool:
            task = progress.add_task(f"generate {cfg.run_name}", total=total)
            futures = [pool.submit(one_call, first, count, batch) for (first, count), batch in calls]
            first_error = None
            for future in as_completed(futures):
                try:
                    gens = future.result()
                except Exception as e:  # setup failure (e.g. LLMError): keep what the other calls produced
                    first_error = first_error or e
                    continue
                for gen in gens:
                    write_json_atomic(generation_path(run, gen.problem_key, gen.sample), dataclasses.asdict(gen))
                    counts["written"] += 1
                    counts["failed"] += bool(gen.error)
                    if cfg.verbose and gen.error:
                        console.print(f"[red]{gen.problem_key} sample {gen.sample}: {gen.error}[/]")
                    progress.advance(task)
        if first_error is not None:
            raise first_error
    finally:
        client.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        cfg = load_cli_config(GenerateConfig, list(argv or []), USAGE, EXAMPLE, PROMPT_ALIASES)
        if cfg is None:  # --help
            return 0
        require(cfg.run_name, "set run_name=NAME: generations go to runs_dir/NAME/")
        if cfg.server_type == "reference":
            cfg.model_name = cfg.model_name or "reference-solutions"
        require(cfg.model_name, "set model_name=...: the served model id, or a local HF model for server_type=embedded")
        counts = generate(cfg)
        console.print(f"{cfg.run_name}: wrote {counts['written']} samples ({counts['failed']} failed requests), "
                      f"kept {counts['skipped']} existing -> {run_dir(cfg.runs_dir, cfg.run_name)}")
        return 0

    return cli_main("generate", body)
