"""`EmbeddedEngine`: a Hugging Face causal LM sampled in-process, with exact token ids and logprobs.

    engine = EmbeddedEngine("/tmp/tiny-qwen3", device="cpu")       # or a hub id, device="cuda"
    [[c]] = engine.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_new_tokens=16, seed=0))
    c.token_ids, c.logprobs   # what an RL trainer consumes

This is the rollout engine of the embedded (one machine) setup and the model behind `kbench serve`.
The sampling loop is our own (not `model.generate`) so that we control exactly which logprob is
reported: `logprobs[t] = log_softmax(logits_t / T)[token_t]`, the distribution the token was drawn
from at temperature T (T = 1 for greedy), before top-p; SGLang reports the same by default. A
trainer that recomputes log_softmax(model(seq).logits / T) on the same sequence gets the same numbers
(up to float noise); with top_p < 1 the sampled distribution is the renormalised nucleus, which
neither side reports, so RL refuses top_p < 1.

Qwen3/Qwen2/Llama-shaped models decode through `fast_decode.FastDecoder` (static KV cache, batched
counter-based sampling, a CUDA-graph decode step on GPUs); other architectures through their own HF
forward with a DynamicCache. Both sample with the same per-row noise, so they draw the same tokens.
"""

from __future__ import annotations

import random
import threading

import torch

from kbencheval.llm.base import Completion, LLMError, SamplingParams, encode_chat, resolve_model_path
from kbencheval.llm.fast_decode import SYNC_EVERY, FastDecoder, mix32, row_keys, sample_next, supports

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
DTYPE_NAMES = tuple(_DTYPES)


def _resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        # bf16 halves memory on GPUs; CPU kernels for bf16 are slow and less exact, so fp32 there.
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype '{dtype}'; choose auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


class EmbeddedEngine:
    """Implements `LLMClient`. For RL and `kbench serve`'s weight route it also offers one thin hook,
    `update_weights(state_dict, version)` plus `state_dict()`; how weights travel (object store,
    disk) is decided by the caller (smart.rollout.engines, kbencheval.llm.serve)."""

    def __init__(self, model_path: str, device: str = "cpu", dtype: str = "auto", max_batch_size: int = 128,
                 fast: bool = True, cuda_graphs: bool | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise LLMError(f"device={device} but torch sees no GPU; pass device=cpu")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model_path = model_path
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        source = resolve_model_path(model_path)
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
        # Static KV cache + batched sampling for Qwen3/Qwen2/Llama shapes; CUDA graphs on GPUs by default.
        graphs = self.device.type == "cuda" if cuda_graphs is None else cuda_graphs
        if graphs and self.device.type != "cuda":
            raise ValueError("cuda_graphs=True needs a CUDA device; leave it unset to use graphs where possible")
        # None: HF generate serves every call (another architecture, or fast=False).
        self.fast_decoder = FastDecoder(self.model, graphs) if fast and supports(self.model) else None
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
        return encode_chat(self.tokenizer, messages)

    def chat(self, messages_batch: list[list[dict]], params: SamplingParams) -> list[list[Completion]]:
        prompts = [self.encode_chat(m) for m in messages_batch]
        rows = [(p, k) for p in range(len(prompts)) for k in range(params.n)]
        # Sample k of every prompt uses seed + k, so a prompt's samples do not depend on its batch mates.
        seeds = [None if params.seed is None else params.seed + k for _, k in rows]
        flat = self._generate([prompts[p] for p, _ in rows], params, seeds)
        return [flat[p * params.n:(p + 1) * params.n] for p in range(len(prompts))]

    def close(self) -> None:
        if self.fast_decoder is not None:
            self.fast_decoder.states.clear()  # static KV caches and captured graphs
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
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((batch, width), dtype=torch.long)
        for i, ids in enumerate(prompts):
            input_ids[i, width - len(ids):] = torch.tensor(ids)
            attn[i, width - len(ids):] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        # Positions count real tokens only, so a padded row sees the same RoPE phases as unpadded.
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        # An unseeded row gets a fresh random seed: the same exact sampler, just not reproducible.
        keys = row_keys([random.getrandbits(63) if s is None else s for s in seeds]).to(dev)
        sampling = (float(params.temperature), float(params.top_p))
        if self.fast_decoder is not None:
            ids, logps, alive, hit = self.fast_decoder.generate(
                input_ids, positions, attn, keys, params.max_new_tokens, sampling,
                tuple(sorted(self.eos_ids)), self.pad_id, self.weights_version)
        else:
            ids, logps, alive, hit = self._hf_decode(input_ids, positions, attn, keys, params.max_new_tokens, sampling)
        return self._completions(prompts, ids.tolist(), logps.tolist(), alive.tolist(), hit.tolist())

    def _hf_decode(self, input_ids, positions, attn, keys, max_new_tokens: int, sampling: tuple):
        """Any causal LM through its own forward and DynamicCache (architectures FastDecoder does not cover)."""
        dev, batch = self.device, input_ids.shape[0]
        vocab_keys = mix32(torch.arange(self.model.get_output_embeddings().weight.shape[0])).to(dev)
        eos = torch.tensor(sorted(self.eos_ids), device=dev)
        step_ids, step_logps, step_alive = [], [], []
        done = torch.zeros(batch, dtype=torch.bool, device=dev)
        cur_ids, cur_pos, past = input_ids, positions, None
        for t in range(max_new_tokens):
            out = self.model(input_ids=cur_ids, attention_mask=attn, position_ids=cur_pos,
                             past_key_values=past, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            next_ids, logp = sample_next(out.logits[:, -1, :].float(), *sampling, keys,
                                         torch.tensor(t, device=dev), vocab_keys)
            step_ids.append(next_ids)
            step_logps.append(logp)
            step_alive.append(~done)
            done = done | torch.isin(next_ids, eos)
            if (t + 1) % SYNC_EVERY == 0 and bool(done.all()):
                break
            cur_ids = torch.where(done, self.pad_id, next_ids)[:, None]
            cur_pos = cur_pos[:, -1:] + 1
            attn = torch.cat([attn, torch.ones((batch, 1), dtype=attn.dtype, device=dev)], dim=1)
        return torch.stack(step_ids, 1), torch.stack(step_logps, 1), torch.stack(step_alive, 1), done

    def _completions(self, prompts, ids_rows, logp_rows, alive_rows, finished) -> list[Completion]:
        completions = []
        for i, prompt in enumerate(prompts):
            keep = [t for t, alive in enumerate(alive_rows[i]) if alive]
            tokens = [ids_rows[i][t] for t in keep]
            completions.append(Completion(
                text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                token_ids=tokens,
                logprobs=[logp_rows[i][t] for t in keep],
                prompt_token_ids=list(prompt),
                finish_reason="stop" if finished[i] else "length",
            ))
        return completions

    # ---- weights: the thin hook RL engines and serve's /update_weights_from_disk use ----
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    @torch.no_grad()
    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy tensors into the live model (all or a subset of its names); then set weights_version.
        All or nothing: names and shapes are checked before any tensor is copied."""
        with self._lock:
            targets = self.model.state_dict(keep_vars=True)
            unknown = sorted(set(state_dict) - set(targets))
            if unknown:
                raise ValueError(f"update_weights: unknown names {unknown[:3]} (+{max(0, len(unknown) - 3)} more); "
                                 "send names from engine.state_dict()")
            for name, value in state_dict.items():
                if tuple(value.shape) != tuple(targets[name].shape):
                    raise ValueError(f"update_weights: {name} has shape {tuple(value.shape)}, "
                                     f"the model expects {tuple(targets[name].shape)}")
            for name, value in state_dict.items():
                targets[name].data.copy_(value.to(device=targets[name].device, dtype=targets[name].dtype))
            self.weights_version = int(version)
