# kernelrl-seed
# expect: wrong
# device: any
# technique: bug, better-primitive
# why: uses torch.var's default unbiased estimator (divides by N-1), off by a factor N/(N-1) inside the sqrt.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
