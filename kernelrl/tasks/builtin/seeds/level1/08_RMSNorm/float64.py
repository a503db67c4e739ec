# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: the reference formula in float64 and cast back: correct, more memory traffic and conversions.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        xd = x.double()
        rms = torch.sqrt(torch.mean(xd ** 2, dim=-1, keepdim=True) + self.eps)
        return (xd / rms * self.weight.double()).float()
