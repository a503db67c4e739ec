# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: torch.softmax does max, exp and normalisation in one vectorised kernel instead of five separate passes.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)
