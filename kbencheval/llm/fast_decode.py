"""The embedded engine's fast path: a static KV cache, batched sampling, and a CUDA-graph decode step.

Runs Qwen3/Qwen2/Llama-shaped HF models by calling their own submodules (projections, norms, rotary
embedding, MLP) in the standard pre-norm order, so weights, numerics and weight updates are the HF
model's own; only the attention and the KV cache are ours: one preallocated buffer per layer
(batch, kv_heads, max_len, head_dim) written in place, which is what lets a decode step be captured
once as a CUDA graph and replayed. On CPU the same step runs eagerly.

Sampling is exact and reproducible per row without a per-row loop: sampling softmax(logits/T)
(after top-p) is the same as taking argmax_i p_i / E_i with E_i ~ Exp(1) independent ("exponential
race", equivalent to Gumbel-max), and E_i = -log(u_i) where u_i is a counter-based hash of (row seed,
step, token id). So a row's draws depend only on its own seed, never on its batch mates or on the
device's RNG state, and the whole batch samples in a few vectorised ops that a graph can hold.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
import torch.nn.functional as F

_M32 = 0xFFFFFFFF
SUPPORTED = ("qwen3", "qwen2", "llama")
CACHE_BUCKET = 256
"""With CUDA graphs, cache lengths round up to a multiple of this, so varying prompt lengths reuse graphs."""
SYNC_EVERY = 16
"""Decode steps between host checks for "every row is done"; steps past the end are masked out."""


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (two multiply-xorshift rounds) on int64 tensors holding values < 2**32;
    the multiplier is < 2**27, so no product overflows int64 and CPU and GPU agree bit for bit."""
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def row_keys(seeds: list[int]) -> torch.Tensor:
    """Per-row hash keys from 64-bit seeds (int64 tensor, values < 2**32)."""
    lo = torch.tensor([s & _M32 for s in seeds], dtype=torch.int64)
    hi = torch.tensor([(s >> 32) & _M32 for s in seeds], dtype=torch.int64)
    return mix32(lo ^ mix32(hi ^ 0x9E3779B9))


def exponential_noise(keys: torch.Tensor, step: torch.Tensor, vocab_keys: torch.Tensor) -> torch.Tensor:
    """E[b, v] ~ Exp(1), a pure function of (keys[b], step, v). `vocab_keys` is mix32(arange(V))."""
    row_step = mix32(keys[:, None] ^ mix32((step + 0x632BE5AB) & _M32))
    bits = mix32(row_step ^ vocab_keys[None, :])
    uniform = ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))  # (0, 1), never 0 or 1
    return -torch.log(uniform)


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail of each row outside the smallest set whose mass reaches top_p."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p
    sorted_p = sorted_p.masked_fill(mass_before >= top_p, 0.0)  # the top token always survives
    return torch.zeros_like(probs).scatter(-1, order, sorted_p)


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, keys: torch.Tensor,
                step: torch.Tensor, vocab_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(next ids, their logprobs at temperature T, before top-p) for fp32 logits of shape (B, V).

    The trainer scores log_softmax(logits / T) too, so engine and trainer logprobs agree at any T.
    """
    if temperature == 0:
        next_ids = logits.argmax(dim=-1)
    else:
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_p < 1.0:
            probs = top_p_filter(probs, top_p)
        next_ids = (probs / exponential_noise(keys, step, vocab_keys)).argmax(dim=-1)
    scaled = logits / temperature if temperature > 0 else logits
    logp = torch.log_softmax(scaled, dim=-1).gather(-1, next_ids[:, None])[:, 0]
    return next_ids, logp


def supports(model) -> bool:
    cfg = model.config
    sliding = getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (getattr(cfg, "layer_types", None) or [])
    return cfg.model_type in SUPPORTED and not sliding and hasattr(model, "model") and hasattr(model.model, "rotary_emb")


@dataclasses.dataclass
class DecodeState:
    """Everything one (batch, max_len, sampling) shape needs; its tensors are a CUDA graph's fixed addresses."""

    k_cache: list[torch.Tensor]
    v_cache: list[torch.Tensor]
    ids: torch.Tensor          # (B, 1) next input token
    pos: torch.Tensor          # (B, 1) its RoPE position (real tokens only, so left padding is invisible)
    col: torch.Tensor          # (1,) its cache column
    step: torch.Tensor         # () generated-token index, the noise counter
    valid: torch.Tensor        # (B, L) column holds a real token of this row (False on left padding)
    keys: torch.Tensor         # (B,) per-row noise keys
    done: torch.Tensor         # (B,) row has emitted eos
    out_ids: torch.Tensor      # (B, L) sampled ids by column
    out_logp: torch.Tensor     # (B, L)
    out_alive: torch.Tensor    # (B, L) row was still generating when this column was sampled
    eos: torch.Tensor          # ids that end a row
    sampling: tuple            # (temperature, top_p), fixed per state: a graph bakes them in
    pad_id: int
    graph: object = None
    graph_version: int = -1


class FastDecoder:
    """Owns decode states (a small LRU keyed by shape and sampling settings) for one HF model."""

    def __init__(self, model, use_cuda_graphs: bool, max_states: int = 2):
        self.model = model
        self.use_cuda_graphs = use_cuda_graphs
        self.max_states = max_states
        self.states: dict[tuple, DecodeState] = {}
        cfg = model.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        vocab = model.get_output_embeddings().weight.shape[0]
        self.vocab_keys = mix32(torch.arange(vocab, dtype=torch.int64)).to(self.device)

    def state(self, batch: int, max_len: int, sampling: tuple, eos: tuple[int, ...], pad_id: int) -> DecodeState:
        key = (batch, max_len, sampling, eos, pad_id)
        if key in self.states:
            self.states[key] = self.states.pop(key)  # most recently used last
            return self.states[key]
        while len(self.states) >= self.max_states:
            self.states.pop(next(iter(self.states)))
        dev, n_layers = self.device, len(self.model.model.layers)
        cache = lambda: torch.zeros(batch, self.n_kv, max_len, self.head_dim, dtype=self.dtype, device=dev)  # noqa: E731
        z = lambda *shape, dtype=torch.int64: torch.zeros(*shape, dtype=dtype, device=dev)  # noqa: E731
        st = DecodeState(
            k_cache=[cache() for _ in range(n_layers)], v_cache=[cache() for _ in range(n_layers)],
            ids=z(batch, 1), pos=z(batch, 1), col=z(1), step=z(()), valid=z(batch, max_len, dtype=torch.bool),
            keys=z(batch), done=z(batch, dtype=torch.bool), out_ids=z(batch, max_len),
            out_logp=z(batch, max_len, dtype=torch.float32), out_alive=z(batch, max_len, dtype=torch.bool),
            eos=torch.tensor(eos, dtype=torch.int64, device=dev), sampling=sampling, pad_id=pad_id)
        self.states[key] = st
        return st

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: torch.Tensor, keys: torch.Tensor,
                 max_new_tokens: int, sampling: tuple, eos: tuple[int, ...], pad_id: int, version: int):
        """Sample up to max_new_tokens for left-padded prompts; returns (ids, logprobs, alive, hit_eos) on
        the device, each (B, max_new_tokens) but hit_eos (B,). One host sync every `SYNC_EVERY` steps."""
        batch, width = input_ids.shape
        # Graphs want few distinct shapes; eager decoding wants no attention over unused columns.
        bucket = CACHE_BUCKET if self.use_cuda_graphs else 16
        max_len = -(-(width + max_new_tokens) // bucket) * bucket
        st = self.state(batch, max_len, sampling, eos, pad_id)
        st.valid.zero_()
        st.valid[:, :width] = attn.bool()
        st.keys.copy_(keys)
        st.done.zero_()
        st.step.zero_()
        st.out_alive.zero_()
        logits = self.prefill(st, input_ids, positions)
        st.col.fill_(width - 1)
        st.pos.copy_(positions[:, -1:])
        self.record(st, logits)
        for t in range(1, max_new_tokens):
            if t % SYNC_EVERY == 0 and bool(st.done.all()):
                break
            self.run_decode(st, version)
        cols = slice(width, width + max_new_tokens)
        return st.out_ids[:, cols], st.out_logp[:, cols], st.out_alive[:, cols], st.done

    def forward(self, st: DecodeState, ids: torch.Tensor, pos: torch.Tensor, cols: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Hidden states of the last position after writing K/V of `ids` at cache columns `cols`.
        mask: (B, 1, Q, L) bool, True where a query may attend to a column."""
        m = self.model.model
        x = m.embed_tokens(ids)
        cos, sin = m.rotary_emb(x, pos)
        cos, sin = cos[:, None], sin[:, None]
        batch, q_len = ids.shape
        for i, layer in enumerate(m.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(batch, q_len, self.n_heads, self.head_dim)
            k = attn.k_proj(h).view(batch, q_len, self.n_kv, self.head_dim)
            v = attn.v_proj(h).view(batch, q_len, self.n_kv, self.head_dim).transpose(1, 2)
            if hasattr(attn, "q_norm"):  # Qwen3 normalises q and k per head before RoPE
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            st.k_cache[i].index_copy_(2, cols, k)
            st.v_cache[i].index_copy_(2, cols, v)
            out = F.scaled_dot_product_attention(q, st.k_cache[i], st.v_cache[i], attn_mask=mask,
                                                 scale=getattr(attn, "scaling", self.head_dim ** -0.5),
                                                 enable_gqa=self.n_kv != self.n_heads)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(batch, q_len, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return m.norm(x[:, -1:])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(hidden)[:, -1].float()

    def prefill(self, st: DecodeState, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Fill columns [0, width) from left-padded prompts; returns the last position's fp32 logits."""
        width, max_len = input_ids.shape[1], st.valid.shape[1]
        cols = torch.arange(width, device=self.device)
        causal = torch.arange(max_len, device=self.device)[None, :] <= cols[:, None]  # (W, L)
        mask = causal[None] & st.valid[:, None, :]
        # A padding query sees nothing else, so let it see itself: an all-masked row would make NaNs
        # that reach the cache through later layers (its outputs are never used).
        mask = (mask | torch.eye(width, max_len, dtype=torch.bool, device=self.device)[None])[:, None]
        return self.logits(self.forward(st, input_ids, positions, cols, mask))

    def decode_step(self, st: DecodeState) -> None:
        """One token for every row, entirely on the device (graph-capturable): forward, sample, record,
        and prepare the next step's inputs."""
        cols = torch.arange(st.valid.shape[1], device=self.device)
        mask = (st.valid & (cols[None, :] <= st.col))[:, None, None, :]
        logits = self.logits(self.forward(st, st.ids, st.pos, st.col, mask))
        self.record(st, logits)

    def record(self, st: DecodeState, logits: torch.Tensor) -> None:
        """Sample from `logits` (the token for column col+1), store it, and advance the state."""
        next_ids, logp = sample_next(logits, *st.sampling, st.keys, st.step, self.vocab_keys)
        slot = st.col + 1
        st.out_ids.index_copy_(1, slot, next_ids[:, None])
        st.out_logp.index_copy_(1, slot, logp[:, None])
        st.out_alive.index_copy_(1, slot, (~st.done)[:, None])
        st.done |= (next_ids[:, None] == st.eos[None, :]).any(-1)  # isin may pick a sort-based kernel
        st.ids.copy_(torch.where(st.done, st.pad_id, next_ids)[:, None])
        st.pos.add_(1)
        st.col.add_(1)
        st.step.add_(1)
        st.valid.index_fill_(1, slot, True)

    def run_decode(self, st: DecodeState, version: int) -> None:
        """One decode step: a CUDA graph replay where enabled (captured on first use per state/weights)."""
        if not self.use_cuda_graphs:
            return self.decode_step(st)
        if st.graph is None or st.graph_version != version:
            try:
                self._capture(st)
            except RuntimeError as exc:  # a model op that cannot be captured must not end a run: go eager
                warnings.warn(f"CUDA-graph capture failed ({str(exc).splitlines()[0][:200]}); decoding eagerly "
                              "from now on (pass cuda_graphs=False to skip the attempt)", RuntimeWarning)
                self.use_cuda_graphs = False
                st.graph = None
                return self.decode_step(st)
            st.graph_version = version
        st.graph.replay()

    def _capture(self, st: DecodeState) -> None:
        # Warm-up steps mutate the state, so run them on a copy of its small tensors and restore.
        saved = [t.clone() for t in (st.ids, st.pos, st.col, st.step, st.valid, st.done, st.out_ids,
                                     st.out_logp, st.out_alive)]
        try:
            self._warm_up_and_capture(st, saved)
        finally:
            self._restore(st, saved)  # capture does not run the step, and a failed one must leave no trace

    def _warm_up_and_capture(self, st: DecodeState, saved: list[torch.Tensor]) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.decode_step(st)
                self._restore(st, saved)
        torch.cuda.current_stream().wait_stream(stream)
        st.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(st.graph, capture_error_mode="thread_local"):  # serve runs other threads
            self.decode_step(st)

    @staticmethod
    def _restore(st: DecodeState, saved: list[torch.Tensor]) -> None:
        for dst, src in zip((st.ids, st.pos, st.col, st.step, st.valid, st.done, st.out_ids, st.out_logp,
                             st.out_alive), saved):
            dst.copy_(src)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
