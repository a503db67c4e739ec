# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: F.elu evaluates the branch per element in one vectorised pass (no exp over the whole tensor, no where).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, alpha=self.alpha)
