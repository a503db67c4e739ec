# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, weight-folding, in-place
# why: conv(x)*s + b = conv_{sW}(x) + (s*b_conv + b): one conv with folded weights/bias, then ReLU in place.
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
        w = self.conv.weight * self.scale
        b = self.conv.bias * self.scale + self.bias.view(-1)
        return F.conv2d(x, w, b, padding=self.conv.padding).relu_()
