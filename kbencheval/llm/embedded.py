"""`EmbeddedEngine`: a Hugging Face causal LM sampled in-process, with exact token ids and logprobs.

    engine = EmbeddedEngine("/tmp/tiny-qwen3", device="cpu")       # or a hub id, device="cuda"
    [[c]] = engine.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_new_tokens=16, seed=0))
    c.token_ids, c.logprobs   # what an RL trainer consumes

This is the rollout engine of the embedded (one machine) setup and the model behind `kbench serve`.
The sampling loop is our own (not `model.generate`) so that we control exactly which logprob is
reported: `logprobs[t] = log_softmax(logits_t)[token_t]` over the model's *unmodified* logits (as if
temperature were 1, before top-p). A trainer that recomputes log_softmax(model(seq).logits) on the
same sequence gets the same numbers (up to float noise), whatever temperature/top_p sampled it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from kbencheval.llm.base import Completion, LLMError, SamplingParams

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def _resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        # bf16 halves memory on GPUs; CPU kernels for bf16 are slow and less exact, so fp32 there.
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype '{dtype}'; choose auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def _check_model_path(model_path: str) -> str:
    path = Path(model_path).expanduser()
    if path.exists():
        return str(path)
    # Hub ids look like "org/name" (or a bare legacy name); anything else is a local path.
    if model_path.startswith((".", "/", "~")) or model_path.count("/") > 1:
        raise LLMError(f"model path {model_path} does not exist; pass a local HF folder or hub id")
    return model_path


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail of each row outside the smallest set whose mass reaches top_p."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)  # the top token always survives
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


class EmbeddedEngine:
    """Implements `LLMClient` plus the weight-sync methods RL needs (`update_weights`, ...)."""

    def __init__(self, model_path: str, device: str = "cpu", dtype: str = "auto", max_batch_size: int = 16):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise LLMError(f"device={device} but torch sees no GPU; pass device=cpu")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model_path = model_path
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        source = _check_model_path(model_path)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source)
            self.model = AutoModelForCausalLM.from_pretrained(source, dtype=_resolve_dtype(dtype, device))
        except OSError as exc:
            raise LLMError(f"could not load model {model_path} ({exc.__class__.__name__}); "
                           "pass a local HF folder or hub id") from exc
        self.model.to(self.device).eval()
        self.eos_ids = self._eos_ids()
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.weights_version = 0
        self._lock = threading.RLock()  # one generation or weight update at a time (serve is threaded)

    def _eos_ids(self) -> set[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        if not ids:
            raise LLMError(f"model {self.model_path} defines no eos token; set eos_token in its tokenizer config")
        return ids

    # ---- LLMClient ----
    def encode_chat(self, messages: list[dict]) -> list[int]:
        """Prompt token ids through the tokenizer's chat template, ready for the assistant's turn."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat(self, messages_batch: list[list[dict]], params: SamplingParams) -> list[list[Completion]]:
        prompts = [self.encode_chat(m) for m in messages_batch]
        rows = [(p, k) for p in range(len(prompts)) for k in range(params.n)]
        # Sample k of every prompt uses seed + k, so a prompt's samples do not depend on its batch mates.
        seeds = [None if params.seed is None else params.seed + k for _, k in rows]
        flat = self._generate([prompts[p] for p, _ in rows], params, seeds)
        return [flat[p * params.n:(p + 1) * params.n] for p in range(len(prompts))]

    def close(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- token level ----
    def generate_ids(self, prompt_ids_batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        """Sample one continuation per prompt (row i uses seed + i). Completion.token_ids holds the
        generated ids (eos included when hit, never padding), logprobs as described in the module doc."""
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompt_ids_batch))]
        return self._generate(prompt_ids_batch, params, seeds)

    def _generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int | None]) -> list[Completion]:
        for ids in prompts:
            if not ids:
                raise ValueError("empty prompt: every prompt needs at least one token")
        out: list[Completion] = []
        with self._lock:
            for start in range(0, len(prompts), self.max_batch_size):
                chunk = slice(start, start + self.max_batch_size)
                try:
                    out += self._generate_batch(prompts[chunk], params, seeds[chunk])
                except torch.OutOfMemoryError as exc:  # one oversized batch must not end a run
                    out += [Completion(text="", prompt_token_ids=list(p), error=f"out of memory: {exc}"[:300])
                            for p in prompts[chunk]]
        return out

    @torch.no_grad()
    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int | None]) -> list[Completion]:
        dev, batch = self.device, len(prompts)
        width = max(len(p) for p in prompts)
        # Left padding keeps every row's last prompt token in the last column.
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long, device=dev)
        attn = torch.zeros((batch, width), dtype=torch.long, device=dev)
        for i, ids in enumerate(prompts):
            input_ids[i, width - len(ids):] = torch.tensor(ids, device=dev)
            attn[i, width - len(ids):] = 1
        # Positions count real tokens only, so a padded row sees the same RoPE phases as unpadded.
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        gens = [None if s is None else torch.Generator(device=dev).manual_seed(s) for s in seeds]
        eos = torch.tensor(sorted(self.eos_ids), device=dev)

        # Per-step results stay on the device; one host sync per step (the all-done check) instead
        # of two per row, which on a GPU costs more than the decode step itself.
        step_ids, step_logps, step_alive = [], [], []
        done = torch.zeros(batch, dtype=torch.bool, device=dev)
        hit_any = torch.zeros(batch, dtype=torch.bool, device=dev)
        cur_ids, cur_pos, past = input_ids, positions, None
        for _ in range(params.max_new_tokens):
            out = self.model(input_ids=cur_ids, attention_mask=attn, position_ids=cur_pos,
                             past_key_values=past, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_ids = self._sample(logits, params, gens)
            step_ids.append(next_ids)
            step_logps.append(torch.log_softmax(logits, dim=-1).gather(-1, next_ids[:, None])[:, 0])
            step_alive.append(~done)
            hit_eos = torch.isin(next_ids, eos) & ~done
            hit_any |= hit_eos
            done |= hit_eos
            if bool(done.all()):
                break
            cur_ids = torch.where(done, self.pad_id, next_ids)[:, None]
            cur_pos = cur_pos[:, -1:] + 1
            attn = torch.cat([attn, torch.ones((batch, 1), dtype=attn.dtype, device=dev)], dim=1)
        ids_rows = torch.stack(step_ids, 1).tolist()
        logp_rows = torch.stack(step_logps, 1).tolist()
        alive_rows = torch.stack(step_alive, 1).tolist()
        finished = hit_any.tolist()
        completions = []
        for i in range(batch):
            keep = [t for t, alive in enumerate(alive_rows[i]) if alive]
            tokens = [ids_rows[i][t] for t in keep]
            completions.append(Completion(
                text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                token_ids=tokens,
                logprobs=[logp_rows[i][t] for t in keep],
                prompt_token_ids=list(prompts[i]),
                finish_reason="stop" if finished[i] else "length",
            ))
        return completions

    @staticmethod
    def _sample(logits: torch.Tensor, params: SamplingParams, gens: list) -> torch.Tensor:
        if params.temperature == 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            probs = _top_p_filter(probs, params.top_p)
        # One generator per row: a row's draws depend on its own seed only.
        return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(gens)])

    # ---- weights ----
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    @torch.no_grad()
    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy tensors into the live model (all or a subset of its names); then set weights_version."""
        with self._lock:
            targets = self.model.state_dict(keep_vars=True)
            unknown = sorted(set(state_dict) - set(targets))
            if unknown:
                raise ValueError(f"update_weights: unknown names {unknown[:3]} (+{max(0, len(unknown) - 3)} more); "
                                 "send names from engine.state_dict()")
            for name, value in state_dict.items():
                target = targets[name]
                if tuple(value.shape) != tuple(target.shape):
                    raise ValueError(f"update_weights: {name} has shape {tuple(value.shape)}, "
                                     f"the model expects {tuple(target.shape)}")
                target.data.copy_(value.to(device=target.device, dtype=target.dtype))
            self.weights_version = int(version)

    def load_weights_from_disk(self, path: str, version: int | None = None) -> int:
        """Load weights saved with save_pretrained (same architecture); returns the new version."""
        from transformers import AutoModelForCausalLM

        if not Path(path).expanduser().exists():
            raise LLMError(f"model path {path} does not exist; pass a folder written by save_pretrained")
        source = AutoModelForCausalLM.from_pretrained(str(Path(path).expanduser()), dtype=self.model.dtype)
        new_version = self.weights_version + 1 if version is None else int(version)
        self.update_weights(source.state_dict(), new_version)
        return new_version
