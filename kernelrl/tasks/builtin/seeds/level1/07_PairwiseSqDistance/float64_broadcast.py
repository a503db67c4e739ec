# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: the same broadcast difference tensor, but in float64 (twice the memory traffic) and cast back.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        xd, yd = x.double(), y.double()
        return ((xd[:, None, :] - yd[None, :, :]) ** 2).sum(dim=-1).float()
