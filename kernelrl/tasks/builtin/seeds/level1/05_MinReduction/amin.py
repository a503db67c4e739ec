# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, avoid-redundant-work
# why: torch.min(dim) also computes the argmin indices that are thrown away; torch.amin returns values only.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.amin(x, dim=self.dim)
