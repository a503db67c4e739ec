# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop
# why: projects one sequence at a time in a Python loop, accumulating the mean in float64.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = self.proj.weight.double()
        b = self.proj.bias.double()
        rows = [F.linear(x[i].double(), w, b).mean(dim=0) for i in range(x.shape[0])]
        return F.gelu(torch.stack(rows)).float()
