"""Product of two matrices and a block of vectors, evaluated left to right: (A @ B) @ v."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B, v):
        return torch.matmul(torch.matmul(A, B), v)


N = 768
K = 4


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N), torch.randn(N, K)]


def get_init_inputs():
    return []
