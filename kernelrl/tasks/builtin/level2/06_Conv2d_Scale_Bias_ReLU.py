"""2-D convolution, multiply by a constant, add a per-channel bias, then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        x = self.conv(x)
        x = x * self.scale
        x = x + self.bias
        return torch.relu(x)


batch_size = 8
in_channels = 3
out_channels = 64
kernel_size = 3
height = 64
width = 64
scale = 2.0
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale, bias_shape]
