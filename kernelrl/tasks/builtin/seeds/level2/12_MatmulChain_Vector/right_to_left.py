# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, matrix-chain-order
# why: (A @ B) @ v = A @ (B @ v): two thin products O(N^2 K) instead of an O(N^3) matrix product.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, v):
        return torch.matmul(A, torch.matmul(B, v))
