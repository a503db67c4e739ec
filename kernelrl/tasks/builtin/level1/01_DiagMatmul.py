"""Matrix product of a diagonal matrix, given as its diagonal A, with a dense matrix B: diag(A) @ B."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.diag(A) @ B


N = 768


def get_inputs():
    return [torch.randn(N), torch.randn(N, N)]


def get_init_inputs():
    return []
