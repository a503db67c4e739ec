# kernelrl-seed
# expect: wrong
# device: any
# technique: layout, bug
# why: drops the transposes but applies the per-feature scale along the sequence axis (dims happen to broadcast).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(1, dim, 1) + 0.5)

    def forward(self, x):
        s = self.scale.view(-1)[: x.shape[1]].view(1, -1, 1)
        return torch.tanh(x * s)
