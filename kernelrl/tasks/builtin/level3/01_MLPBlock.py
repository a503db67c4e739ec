"""Pre-norm transformer MLP block: x + fc2(GELU_tanh(fc1(LayerNorm(x)))), with LayerNorm and GELU written out."""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, hidden_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.norm_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        h = (x - mean) / torch.sqrt(var + self.eps) * self.norm_weight + self.norm_bias
        h = self.fc1(h)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.fc2(h)


batch_size = 4
seq_len = 128
dim = 256
hidden_dim = 1024


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden_dim]
