# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work, precision
# why: builds the dense diagonal matrix and multiplies in float64 "for accuracy": correct, but a slower dense GEMM.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return (torch.diag(A.double()) @ B.double()).float()
