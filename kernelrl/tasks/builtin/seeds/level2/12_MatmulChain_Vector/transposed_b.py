# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, matrix-chain-order, bug
# why: reorders the product but multiplies by B transposed (B^T @ v), a classic layout slip with square matrices.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, v):
        return torch.matmul(A, torch.matmul(B.t(), v))
