# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: the same formula evaluated in float64 and cast back: correct, but twice the memory traffic plus conversions.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        xd = x.double()
        mean = xd.mean(dim=-1, keepdim=True)
        var = ((xd - mean) ** 2).mean(dim=-1, keepdim=True)
        y = (xd - mean) / torch.sqrt(var + self.eps) * self.weight.double() + self.bias.double()
        return y.float()
