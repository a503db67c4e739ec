# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, gemm
# why: |x-y|^2 = |x|^2 + |y|^2 - 2 x.y: one GEMM (addmm) instead of materialising the (n, m, d) difference tensor.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        xx = (x * x).sum(dim=1, keepdim=True)
        yy = (y * y).sum(dim=1).unsqueeze(0)
        return torch.addmm(xx + yy, x, y.t(), beta=1.0, alpha=-2.0).clamp_min_(0.0)
