# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: F.hardswish is a piecewise-linear stand-in for swish, not the same function.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.hardswish(x)
