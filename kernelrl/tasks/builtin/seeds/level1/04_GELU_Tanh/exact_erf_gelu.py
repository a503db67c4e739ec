# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: F.gelu's default is the exact erf form, not the tanh approximation; they differ by up to ~5e-4.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x)
