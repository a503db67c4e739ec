# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, weight-folding
# why: fc2(fc1(x)) = x (W2 W1)^T + (W2 b1 + b2); the fused 256x256 weight costs far less than two wide GEMMs.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        w = self.fc2.weight @ self.fc1.weight
        b = torch.addmv(self.fc2.bias, self.fc2.weight, self.fc1.bias)
        return F.linear(x, w, b)
