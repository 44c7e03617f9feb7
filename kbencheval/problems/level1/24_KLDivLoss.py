"""KL divergence KL(q || p) between two softmax distributions given as logits, batch-mean reduced."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
num_classes = 32768

SMALL_SIZES = {"batch_size": 5, "num_classes": 1200}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(p_logits, dim=-1)
        log_q = F.log_softmax(q_logits, dim=-1)
        # sum_c q_c * (log q_c - log p_c), summed over classes and divided by the batch size.
        return F.kl_div(log_p, log_q, reduction="batchmean", log_target=True)


def get_inputs():
    return [torch.randn(batch_size, num_classes) * 2.0, torch.randn(batch_size, num_classes) * 2.0]


def get_init_inputs():
    return []
