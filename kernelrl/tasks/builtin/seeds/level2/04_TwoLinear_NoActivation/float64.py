# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: both layers in float64 and cast back: correct, two slower double-precision GEMMs.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        h = F.linear(x.double(), self.fc1.weight.double(), self.fc1.bias.double())
        return F.linear(h, self.fc2.weight.double(), self.fc2.bias.double()).float()
