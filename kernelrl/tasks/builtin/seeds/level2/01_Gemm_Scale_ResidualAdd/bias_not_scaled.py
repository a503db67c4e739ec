# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, weight-folding, bug
# why: folds (1+s) into the weight but forgets to scale the bias.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return F.linear(x, self.linear.weight * (1.0 + self.scaling_factor), self.linear.bias)
