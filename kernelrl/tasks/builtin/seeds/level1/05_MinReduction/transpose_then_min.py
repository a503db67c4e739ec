# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work, layout
# why: moves the reduced dim last with a contiguous copy (and computes indices it never uses) before reducing.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        xt = x.movedim(self.dim, -1).contiguous()
        return torch.min(xt, dim=-1)[0].contiguous()
