# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, reorder
# why: the mean over tokens commutes with the affine layer: mean(x W^T + b) = mean(x) W^T + b, so pool first (S times fewer FLOPs).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.proj(x.mean(dim=1)))
