"""A small image classifier: two (conv3x3 + ReLU + 2x2 max-pool) stages, flatten, Linear."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
in_channels = 3
channels1 = 32
channels2 = 64
height = 128
width = 128
num_classes = 10

SMALL_SIZES = {"batch_size": 3, "channels1": 6, "channels2": 10, "height": 11, "width": 9}
ALLOWED_TORCH_OPS = ["aten.convolution"]
# The classifier's dot products run over 64*32*32 = 65536 features: fp32 order effects ~1e-5.
TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}


class Model(nn.Module):
    def __init__(self, in_channels: int, channels1: int, channels2: int, height: int, width: int, num_classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels1, 3, padding=1)
        self.conv2 = nn.Conv2d(channels1, channels2, 3, padding=1)
        self.fc = nn.Linear(channels2 * (height // 2 // 2) * (width // 2 // 2), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, channels1, channels2, height, width, num_classes]
