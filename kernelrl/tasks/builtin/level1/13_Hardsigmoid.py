"""Hard sigmoid activation: clamp(x / 6 + 1/2, 0, 1)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp(x / 6.0 + 0.5, min=0.0, max=1.0)


batch_size = 4096
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim) * 4.0]


def get_init_inputs():
    return []
