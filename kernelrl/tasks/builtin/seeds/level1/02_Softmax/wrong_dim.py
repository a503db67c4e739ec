# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: uses the fast primitive but normalises over dim 0 (the batch) instead of dim 1.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=0)
