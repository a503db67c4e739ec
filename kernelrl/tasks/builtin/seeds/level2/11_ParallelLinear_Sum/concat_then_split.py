# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work
# why: concatenates the two weight matrices into one wide GEMM, then splits and adds: same FLOPs plus copies.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.branch_a = nn.Linear(in_features, out_features)
        self.branch_b = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = torch.cat([self.branch_a.weight, self.branch_b.weight], dim=0).double()
        b = torch.cat([self.branch_a.bias, self.branch_b.bias], dim=0).double()
        y = F.linear(x.double(), w, b)
        n = self.branch_a.out_features
        return (y[:, :n] + y[:, n:]).float()
