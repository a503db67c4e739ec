# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work
# why: writes sigmoid out as 1 / (1 + exp(-x)) with separate negate, exp, add, reciprocal and multiply passes.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * (1.0 / (1.0 + torch.exp(-x)))
