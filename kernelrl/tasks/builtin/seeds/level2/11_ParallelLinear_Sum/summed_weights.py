# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, weight-folding
# why: A(x) + B(x) = x (Wa + Wb)^T + (ba + bb): add the weights (small) and do one GEMM instead of two.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.branch_a = nn.Linear(in_features, out_features)
        self.branch_b = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.linear(x, self.branch_a.weight + self.branch_b.weight, self.branch_a.bias + self.branch_b.bias)
