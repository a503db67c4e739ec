# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: fused primitives, but the layer norm is called without its learned shift (norm_bias dropped).
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
        h = F.layer_norm(x, (x.shape[-1],), self.norm_weight, None, self.eps)
        h = F.gelu(self.fc1(h), approximate="tanh")
        return self.fc2(h).add_(x)
