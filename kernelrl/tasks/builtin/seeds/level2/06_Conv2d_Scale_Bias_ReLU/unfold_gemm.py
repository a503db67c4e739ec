# kernelrl-seed
# expect: slower
# device: any
# technique: im2col, gemm
# why: explicit im2col with F.unfold, a GEMM, then the scale, bias and ReLU as separate passes: correct but slower.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        b, c, h, w = x.shape
        k = self.conv.kernel_size[0]
        cols = F.unfold(x, k, padding=k // 2)
        y = torch.matmul(self.conv.weight.view(self.conv.out_channels, -1), cols) + self.conv.bias.view(1, -1, 1)
        y = y.view(b, -1, h, w) * self.scale + self.bias
        return torch.relu(y)
