"""Allocates more GPU memory than exists."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        big = torch.empty(1 << 42, dtype=torch.uint8, device=x.device)
        return torch.softmax(x, dim=1) + big[0]
