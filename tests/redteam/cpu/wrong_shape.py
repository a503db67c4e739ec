"""Returns a transposed result."""
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1).t()
