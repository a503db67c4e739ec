# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, bug
# why: the GEMM expansion with |x| and |y| (norms) where the squared norms belong.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        xx = x.norm(dim=1, keepdim=True)
        yy = y.norm(dim=1).unsqueeze(0)
        return torch.addmm(xx + yy, x, y.t(), beta=1.0, alpha=-2.0).clamp_min_(0.0)
