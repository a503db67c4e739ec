"""Dereferences a null pointer."""
import ctypes
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
        return x
