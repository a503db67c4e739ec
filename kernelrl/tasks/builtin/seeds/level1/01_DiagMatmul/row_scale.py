# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, broadcast
# why: diag(A) @ B just scales row i of B by A[i]; a broadcast multiply is O(N^2) instead of an O(N^3) matmul.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return A.unsqueeze(1) * B
