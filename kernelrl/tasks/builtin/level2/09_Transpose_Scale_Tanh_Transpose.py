"""Transpose (batch, seq, dim) to (batch, dim, seq), scale per feature, tanh, and transpose back (copies each time)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(1, dim, 1) + 0.5)

    def forward(self, x):
        y = x.transpose(1, 2).contiguous()
        y = torch.tanh(y * self.scale)
        return y.transpose(1, 2).contiguous()


batch_size = 16
seq_len = 256
dim = 512


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
