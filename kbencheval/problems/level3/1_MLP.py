"""A multi-layer perceptron: Linear + ReLU hidden layers, then a Linear output layer."""

import torch
import torch.nn as nn

batch_size = 2048
input_size = 2048
hidden_sizes = [4096, 4096]
output_size = 1024

SMALL_SIZES = {"batch_size": 9, "input_size": 37, "hidden_sizes": [45, 29], "output_size": 19}
# Three chained fp32 GEMMs with K up to 4096: summation order moves results by ~1e-5.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, input_size: int, hidden_sizes: list, output_size: int):
        super().__init__()
        layers = []
        prev = input_size
        for h in hidden_sizes:
            layers += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        layers.append(nn.Linear(prev, output_size))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_sizes, output_size]
