"""Cross-entropy of logits (batch, classes) against integer class targets, averaged over the batch."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
num_classes = 32768

SMALL_SIZES = {"batch_size": 7, "num_classes": 1000}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes) * 3.0, torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
