# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work
# why: computes the softmax, sorts every row in descending order and takes the first index: correct, O(n log n).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        probs = torch.softmax(self.fc(x), dim=1)
        return torch.sort(probs, dim=1, descending=True, stable=True).indices[:, 0]
