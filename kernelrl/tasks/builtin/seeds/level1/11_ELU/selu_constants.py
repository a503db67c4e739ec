# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: F.selu is ELU with fixed scale and alpha (1.0507, 1.6733), not ELU with alpha 1.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.selu(x)
