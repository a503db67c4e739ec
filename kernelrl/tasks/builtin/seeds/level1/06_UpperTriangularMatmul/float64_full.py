# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: the full dense product in float64, then triu and a cast back: correct, but a slower double-precision GEMM.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.triu(A.double() @ B.double()).float()
