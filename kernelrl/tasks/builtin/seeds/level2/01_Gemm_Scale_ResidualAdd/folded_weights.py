# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, weight-folding
# why: x*s + x = x*(1+s); folding (1+s) into W and b (per call, tiny) leaves one addmm and no extra passes or clone.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        k = 1.0 + self.scaling_factor
        return F.linear(x, self.linear.weight * k, self.linear.bias * k)
