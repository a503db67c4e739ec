# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: F.silu computes x * sigmoid(x) in one vectorised kernel, without the intermediate sigmoid tensor.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)
