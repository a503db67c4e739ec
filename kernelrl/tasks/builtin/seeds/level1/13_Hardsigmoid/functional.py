# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: F.hardsigmoid is clamp(x / 6 + 1/2, 0, 1) in one vectorised pass instead of three.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.hardsigmoid(x)
