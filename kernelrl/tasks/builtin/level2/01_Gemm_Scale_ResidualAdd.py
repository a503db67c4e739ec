"""Linear layer, then the output scaled by a constant and added back to itself (a scaled residual)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.linear(x)
        original = x.clone().detach()
        x = x * self.scaling_factor
        x = x + original
        return x


batch_size = 2048
in_features = 64
out_features = 1024
scaling_factor = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
