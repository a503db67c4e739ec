"""RMS normalisation over the last dimension with a learned scale: x / sqrt(mean(x^2) + eps) * weight."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 16
seq_len = 256
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
