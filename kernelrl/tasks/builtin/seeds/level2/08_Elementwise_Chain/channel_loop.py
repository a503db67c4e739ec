# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop
# why: applies the full op chain channel by channel in a Python loop: same arithmetic, many small kernels.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        out = torch.empty_like(x)
        for c in range(x.shape[1]):
            y = F.leaky_relu(torch.relu(x[:, c]), negative_slope=0.01)
            y = y * 2.0 / 2.0 + self.bias[c]
            out[:, c] = torch.sigmoid(y)
        return out
