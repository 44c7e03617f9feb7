"""Micro-batches: greedy packing by token budget, right padding, response-aligned masks.

Position t of the shifted tensors (`*_BT` with T = longest row - 1) is the prediction of token t+1,
so a sample with P prompt and R response tokens has its response at shifted positions P-1 .. P+R-2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from smart.sample import Sample


def pack_micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Greedy packing: longest first, add rows while rows x longest row stays within `budget`.

    Sorting first keeps rows of similar length together, so right padding wastes little. A row
    longer than the budget gets a micro-batch of its own rather than an error.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@dataclasses.dataclass
class MicroBatch:
    input_ids_BT: torch.Tensor  # full rows, right padded; T here is the longest row
    attention_mask_BT: torch.Tensor
    target_ids_BT: torch.Tensor  # input_ids shifted left by one (T - 1 columns)
    response_mask_BT: torch.Tensor  # 1 where the target is a response token
    loss_mask_BT: torch.Tensor  # 1 where the target is a response token with loss_mask 1
    starts: list[int]  # shifted position of each row's first response token (P - 1)
    lengths: list[int]  # R, response tokens per row

    def scatter(self, per_sample: Sequence[Sequence[float]], dtype=torch.float32) -> torch.Tensor:
        """Place per-response-token values (old logprobs, ...) at their shifted positions; 0 elsewhere."""
        out = torch.zeros(self.target_ids_BT.shape, dtype=dtype)
        for row, (start, n, values) in enumerate(zip(self.starts, self.lengths, per_sample)):
            out[row, start : start + n] = torch.as_tensor(values, dtype=dtype)
        return out.to(self.target_ids_BT.device)

    def gather(self, values_BT: torch.Tensor) -> list[list[float]]:
        """Inverse of scatter: each row's response positions as a list."""
        values = values_BT.detach().float().cpu()
        return [values[row, s : s + n].tolist() for row, (s, n) in enumerate(zip(self.starts, self.lengths))]


def build_micro_batch(samples: Sequence[Sample], device: torch.device | str = "cpu", pad_id: int = 0) -> MicroBatch:
    rows, starts, lengths = [], [], []
    for s in samples:
        if not s.prompt_token_ids:
            raise ValueError(
                f"sample {s.index} has no prompt tokens: the first response token needs a prompt token "
                "before it; put at least the chat template's opening tokens in prompt_token_ids"
            )
        s.validate()
        rows.append(list(s.prompt_token_ids) + list(s.response_token_ids))
        starts.append(len(s.prompt_token_ids) - 1)
        lengths.append(len(s.response_token_ids))
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), T), dtype=torch.long)
    resp = torch.zeros((len(rows), T - 1), dtype=torch.float32)
    loss = torch.zeros((len(rows), T - 1), dtype=torch.float32)
    for i, (row, s) in enumerate(zip(rows, samples)):
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        resp[i, starts[i] : starts[i] + lengths[i]] = 1
        loss[i, starts[i] : starts[i] + lengths[i]] = torch.tensor(s.loss_mask, dtype=torch.float32)
    ids, attn = ids.to(device), attn.to(device)
    return MicroBatch(ids, attn, ids[:, 1:], resp.to(device), loss.to(device), starts, lengths)
