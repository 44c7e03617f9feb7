"""One forward pass that returns logprobs (and entropy) at chosen positions, never full logits.

The HF causal LM runs as usual up to its final hidden states; its output head is swapped, for this
call only, for `smart.algo.chunked_logprobs` over the positions in `mask_BT`. The swap is an
instance-level `forward` on the head module, so parameter names, tied embeddings, FSDP2's hooks
(everything still runs inside the root module's forward) and gradient checkpointing are untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

from smart.algo import chunked_logprobs, place
from smart.backends.torch.batching import MicroBatch


@dataclasses.dataclass
class Scores:
    logprobs_BT: torch.Tensor  # fp32, 0 outside the scored positions
    entropy_BT: torch.Tensor | None  # fp32, only when asked for


@contextlib.contextmanager
def _head_scores(model, mask_BT: torch.Tensor, target_ids_BT: torch.Tensor, temperature: float,
                 chunk_tokens: int, entropy: str):
    head = model.get_output_embeddings()
    pick_BT = mask_BT.bool()
    ids_N = target_ids_BT[pick_BT]

    def forward(hidden_BTH: torch.Tensor) -> torch.Tensor:
        # hidden position t predicts token t+1: drop the last column, then keep the scored positions
        h_NH = hidden_BTH[:, :-1][pick_BT]
        lp_N, ent_N = chunked_logprobs(h_NH, head.weight, ids_N, temperature=temperature, chunk_tokens=chunk_tokens,
                                       with_entropy=entropy != "none", entropy_grad=entropy == "loss")
        return lp_N[None] if ent_N is None else torch.stack([lp_N, ent_N])

    head.forward = forward
    try:
        yield
    finally:
        del head.forward  # back to the class's forward


def score(model, mb: MicroBatch, mask_BT: torch.Tensor, *, temperature: float = 1.0, chunk_tokens: int = 2048,
          entropy: str = "none", autocast=contextlib.nullcontext) -> Scores:
    """Logprobs of `mb.target_ids_BT` where `mask_BT` is 1, under softmax(logits / temperature).

    entropy: "none" | "metric" (computed without a gradient) | "loss" (differentiable).
    """
    if entropy not in ("none", "metric", "loss"):
        raise ValueError(f"entropy must be 'none', 'metric' or 'loss', got {entropy!r}")
    with _head_scores(model, mask_BT, mb.target_ids_BT, temperature, chunk_tokens, entropy), autocast():
        packed = model(input_ids=mb.input_ids_BT, attention_mask=mb.attention_mask_BT, use_cache=False).logits
    logprobs_BT = place(packed[0], mask_BT)
    entropy_BT = place(packed[1], mask_BT) if packed.shape[0] > 1 else None
    return Scores(logprobs_BT, entropy_BT)
