# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, in-place
# why: one vector_norm pass gives sum(x^2) without materialising x**2; rsqrt and in-place scaling save two passes.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        d = x.shape[-1]
        r = torch.linalg.vector_norm(x, dim=-1, keepdim=True).pow_(2).div_(d).add_(self.eps).rsqrt_()
        return torch.mul(x, r).mul_(self.weight)
