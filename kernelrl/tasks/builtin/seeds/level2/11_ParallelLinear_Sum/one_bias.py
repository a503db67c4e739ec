# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, weight-folding, bug
# why: sums the weights but keeps only one branch's bias.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.branch_a = nn.Linear(in_features, out_features)
        self.branch_b = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.linear(x, self.branch_a.weight + self.branch_b.weight, self.branch_a.bias)
