# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: the whole block in float64 (weights cast every call) and cast back: correct, slower GEMMs and more traffic.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim, hidden_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.norm_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        xd = x.double()
        mean = xd.mean(dim=-1, keepdim=True)
        var = ((xd - mean) ** 2).mean(dim=-1, keepdim=True)
        h = (xd - mean) / torch.sqrt(var + self.eps) * self.norm_weight.double() + self.norm_bias.double()
        h = F.linear(h, self.fc1.weight.double(), self.fc1.bias.double())
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
        return (xd + F.linear(h, self.fc2.weight.double(), self.fc2.bias.double())).float()
