# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: does the linear layer in float64 and keeps the clone/scale/add sequence: correct, a slower double GEMM.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.linear(x.double(), self.linear.weight.double(), self.linear.bias.double())
        return (y * self.scaling_factor + y).float()
