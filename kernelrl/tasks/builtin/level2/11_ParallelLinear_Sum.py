"""Two linear layers applied to the same input and summed (two branches of the same shape)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.branch_a = nn.Linear(in_features, out_features)
        self.branch_b = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.branch_a(x) + self.branch_b(x)


batch_size = 1024
in_features = 512
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
