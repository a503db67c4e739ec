"""Log-sum-exp over the last dimension, with the usual max shift for stability."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = x.max(dim=-1, keepdim=True).values
        return torch.log(torch.sum(torch.exp(x - m), dim=-1)) + m.squeeze(-1)


batch_size = 2048
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
