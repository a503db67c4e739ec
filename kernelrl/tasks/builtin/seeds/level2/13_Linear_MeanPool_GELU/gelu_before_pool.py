# kernelrl-seed
# expect: wrong
# device: any
# technique: reorder, bug
# why: pools first but also moves the GELU inside: GELU is nonlinear, so it does not commute with the mean.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.proj(F.gelu(x).mean(dim=1))
