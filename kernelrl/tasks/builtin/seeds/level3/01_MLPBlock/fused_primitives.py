# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion, in-place
# why: F.layer_norm and F.gelu(approximate="tanh") replace ~14 elementwise passes; the residual is added in place.
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
        h = F.layer_norm(x, (x.shape[-1],), self.norm_weight, self.norm_bias, self.eps)
        h = F.gelu(self.fc1(h), approximate="tanh")
        out = self.fc2(h)
        return out.add_(x)
