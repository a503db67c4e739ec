# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work
# why: builds the three pieces and two masks and selects with nested torch.where: correct, many extra passes.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        mid = x / 6.0 + 0.5
        ones = torch.ones_like(x)
        zeros = torch.zeros_like(x)
        return torch.where(x >= 3.0, ones, torch.where(x <= -3.0, zeros, mid))
