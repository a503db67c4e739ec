# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, bug
# why: drops the bias "because argmax only depends on the ordering", but the bias differs per class.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return torch.argmax(torch.matmul(x, self.fc.weight.t()), dim=1)
