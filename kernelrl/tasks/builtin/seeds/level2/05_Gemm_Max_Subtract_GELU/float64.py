# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: runs the whole sequence in float64 (GEMM included) and casts back: correct, just slower.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, max_dim):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.max_dim = max_dim

    def forward(self, x):
        y = F.linear(x.double(), self.gemm.weight.double(), self.gemm.bias.double())
        y = torch.max(y, dim=self.max_dim, keepdim=True).values
        y = y - y.mean(dim=1, keepdim=True)
        return F.gelu(y).float()
