# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: off by one: the slice drops the last element of the reduced dimension, so a few minima are missed.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        n = x.shape[self.dim]
        return torch.amin(x.narrow(self.dim, 0, n - 1), dim=self.dim)
