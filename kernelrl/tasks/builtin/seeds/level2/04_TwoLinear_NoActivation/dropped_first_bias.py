# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, weight-folding, bug
# why: fuses the weights but drops fc1's bias (it must pass through fc2's weight: b = W2 b1 + b2).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        return F.linear(x, self.fc2.weight @ self.fc1.weight, self.fc2.bias)
