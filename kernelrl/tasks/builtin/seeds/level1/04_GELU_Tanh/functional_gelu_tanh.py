# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: F.gelu(approximate="tanh") is the same formula in one vectorised kernel instead of seven elementwise passes.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
