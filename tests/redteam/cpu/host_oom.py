"""Allocates far more host memory than any machine has."""
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        big = torch.empty(200 * 1024**3, dtype=torch.uint8)
        big.fill_(1)
        return torch.softmax(x, dim=1)
