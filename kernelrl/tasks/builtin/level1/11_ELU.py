"""ELU activation with alpha 1: x for x > 0, alpha (exp(x) - 1) otherwise."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return torch.where(x > 0, x, self.alpha * (torch.exp(x) - 1.0))


batch_size = 2048
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [1.0]
