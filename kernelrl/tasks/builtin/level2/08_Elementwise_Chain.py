"""A chain of elementwise ops: ReLU, LeakyReLU, multiply by 2, divide by 2, add a per-channel bias, sigmoid."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = torch.relu(x)
        x = F.leaky_relu(x, negative_slope=0.01)
        x = x * 2.0
        x = x / 2.0
        x = x + self.bias
        return torch.sigmoid(x)


batch_size = 16
channels = 64
height = 32
width = 64
bias_shape = (channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [bias_shape]
