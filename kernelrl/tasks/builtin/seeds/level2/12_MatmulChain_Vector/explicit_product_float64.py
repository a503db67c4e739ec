# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: keeps the left-to-right order and does it in float64: correct, a slower double-precision N^3 product.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, v):
        return ((A.double() @ B.double()) @ v.double()).float()
