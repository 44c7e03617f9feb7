"""Problems for RL with a train/held-out split, and SFT conversations turned into Samples.

    ds = DataSource(DataConfig(source="bundled", levels=[1], heldout_fraction=0.2), seed=0)
    batch = ds.next_problems(2)         # a seeded order per epoch; state() / load_state() to resume
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from kbencheval.dataset import Problem, load_problems
from smart.config import ConfigError, DataConfig
from smart.sample import Sample, SampleStatus


class DataSource:
    def __init__(self, cfg: DataConfig, seed: int = 0):
        """`seed` (the run's seed) orders the training problems; `cfg.split_seed` alone decides the split."""
        problems: list[Problem] = []
        for level in cfg.levels:
            problems += load_problems(cfg.source, level, path=cfg.path or None)
        if cfg.problems:
            missing = set(cfg.problems) - {p.key for p in problems}
            if missing:
                raise ConfigError(f"data.problems names unknown keys {sorted(missing)}; keys look like L1_1_ReLU")
            problems = [p for p in problems if p.key in cfg.problems]
        if not problems:
            raise ConfigError(f"no problems in data.source={cfg.source} levels={cfg.levels}; check data.levels / data.path")
        self.cfg, self.seed = cfg, seed
        self.by_key = {p.key: p for p in problems}
        # Split by a hash of the key, so adding a problem never moves the others between splits.
        ranked = sorted(problems, key=lambda p: hashlib.sha256(f"{cfg.split_seed}:{p.key}".encode()).hexdigest())
        n_heldout = min(int(len(problems) * cfg.heldout_fraction), len(problems) - 1)
        self.heldout = sorted(ranked[:n_heldout], key=lambda p: p.key)
        self.train = sorted(ranked[n_heldout:], key=lambda p: p.key)
        self.epoch, self.cursor = 0, 0

    def _order(self) -> list[Problem]:
        order = list(self.train)
        random.Random(self.seed * 100003 + self.epoch).shuffle(order)
        return order

    def next_problems(self, n: int) -> list[Problem]:
        out = []
        while len(out) < n:
            order = self._order()
            take = order[self.cursor : self.cursor + n - len(out)]
            out += take
            self.cursor += len(take)
            if self.cursor >= len(order):
                self.epoch, self.cursor = self.epoch + 1, 0
        return out

    def state(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state(self, state: dict) -> None:
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])


def conversation_to_sample(tokenizer, messages: list[dict], index: int = 0) -> Sample:
    """SFT: everything before the first assistant turn is the prompt; later assistant tokens get loss_mask 1.

    The chat template is rendered on growing prefixes of the conversation and each new piece is
    tokenized on its own, so the mask is exact per token; a template whose renderings are not
    prefixes of each other (one that rewrites earlier turns) is an error rather than a silent mismatch.
    """
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or first == 0:
        raise ConfigError(f"SFT conversation {index} needs a user turn followed by an assistant turn")
    prompt_text = tokenizer.apply_chat_template(messages[:first], add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    response_ids, mask, done_text = [], [], prompt_text
    for i in range(first, len(messages)):
        is_assistant = messages[i]["role"] == "assistant"
        gen_prompt = i + 1 < len(messages) and messages[i + 1]["role"] == "assistant"
        text = tokenizer.apply_chat_template(messages[: i + 1], add_generation_prompt=gen_prompt, tokenize=False)
        if not text.startswith(done_text):
            raise ConfigError(
                f"SFT conversation {index}: the chat template rewrites earlier turns, so assistant tokens "
                "cannot be masked exactly; use a model whose template only appends"
            )
        piece = tokenizer(text[len(done_text) :], add_special_tokens=False)["input_ids"]
        piece_mask = [1 if is_assistant else 0] * len(piece)
        if is_assistant and tokenizer.eos_token_id in piece:
            # template glue after the end-of-turn token ("\n") is never sampled: not trained on
            end = piece.index(tokenizer.eos_token_id) + 1
            piece_mask[end:] = [0] * (len(piece) - end)
        response_ids += piece
        mask += piece_mask
        done_text = text
    return Sample(
        index=index,
        group_index=index,
        prompt=messages[:first],
        prompt_token_ids=prompt_ids,
        response_token_ids=response_ids,
        loss_mask=mask,
        response_text=messages[first]["content"],
        status=SampleStatus.COMPLETED,
    )


def load_sft_conversations(cfg: DataConfig, kernel_language: str, prompt_style: str) -> list[list[dict]]:
    """JSONL of {"messages": [...]} rows, a dataset's `messages` column, or each problem's prompt plus
    its reference solution."""
    if cfg.sft_dataset:
        return load_sft_dataset(cfg.sft_dataset, cfg.sft_split)
    if cfg.sft_jsonl:
        path = Path(cfg.sft_jsonl)
        if path.is_dir():  # a dataset folder from `kbench corpus filter`
            path = path / "train.jsonl"
        if not path.is_file():
            raise ConfigError(f"data.sft_jsonl={path} does not exist; give a JSONL file of {{\"messages\": [...]}} rows")
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        bad = [i for i, r in enumerate(rows) if not isinstance(r, dict) or "messages" not in r]
        if bad:
            raise ConfigError(f"{path}: rows {bad[:5]} have no 'messages' list; each row is {{\"messages\": [...]}}")
        return [r["messages"] for r in rows]
    from kbencheval.prompts import build_prompt

    convs = []
    for problem in DataSource(cfg).train:
        if problem.solution_source:
            answer = f"```python\n{problem.solution_source.strip()}\n```"
            convs.append(build_prompt(problem.source, backend=kernel_language, style=prompt_style) + [{"role": "assistant", "content": answer}])
    if not convs:
        raise ConfigError("no problem has a reference solution; set data.sft_jsonl or use data.source=bundled")
    return convs


def load_sft_dataset(source: str, split: str = "train") -> list[list[dict]]:
    """The `messages` column of a hub dataset (owner/name), a `save_to_disk` folder, or parquet file(s)."""
    import datasets

    datasets.disable_progress_bars()
    path = Path(source)
    try:
        if (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise ConfigError(f"data.sft_dataset={source} has splits {sorted(ds)}, not '{split}': set data.sft_split")
                ds = ds[split]
        elif path.exists():
            files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
            if not files or any(f.suffix != ".parquet" for f in files):
                raise ConfigError(f"data.sft_dataset={source} is neither a save_to_disk folder nor parquet file(s); "
                                  "for JSONL use data.sft_jsonl")
            ds = datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train")
        elif source.count("/") == 1 and not source.startswith((".", "/", "~")):
            ds = datasets.load_dataset(source, split=split)
        else:
            raise ConfigError(f"data.sft_dataset={source} does not exist; give a hub id (owner/name), a save_to_disk "
                              "folder or a parquet file")
    except ConfigError:
        raise
    except Exception as e:  # datasets raises many types (hub, split, file): the user needs one line
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot load data.sft_dataset={source} (split {split}): {first}") from None
    if "messages" not in ds.column_names:
        raise ConfigError(f"data.sft_dataset={source} has columns {ds.column_names} and no 'messages' column of "
                          "[{role, content}, ...] conversations")
    # arrow gives every message every key seen in the column; a key another row had comes back as None
    convs = [[{k: v for k, v in m.items() if v is not None} for m in conv] for conv in ds["messages"]]
    if not convs:
        raise ConfigError(f"data.sft_dataset={source} (split {split}) has no rows")
    return convs
