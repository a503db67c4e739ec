# kernelrl-seed
# expect: wrong
# device: any
# technique: bug
# why: subtracts the mean over the batch (dim 0) instead of dim 1, so the output is no longer identically zero.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, max_dim):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.max_dim = max_dim

    def forward(self, x):
        x = self.gemm(x)
        x = torch.amax(x, dim=self.max_dim, keepdim=True)
        return F.gelu(x - x.mean(dim=0, keepdim=True))
