# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: divides the sum of squares by N-1 instead of N, a 1/(2N) relative error that a loose tolerance would pass.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        d = x.shape[-1]
        r = torch.linalg.vector_norm(x, dim=-1, keepdim=True).pow_(2).div_(d - 1).add_(self.eps).rsqrt_()
        return torch.mul(x, r).mul_(self.weight)
