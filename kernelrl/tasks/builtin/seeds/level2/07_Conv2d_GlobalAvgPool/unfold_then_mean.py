# kernelrl-seed
# expect: slower
# device: any
# technique: im2col, gemm
# why: im2col (F.unfold), a GEMM to the full conv output, then the mean: correct, with a large temporary.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        cols = F.unfold(x, self.conv.kernel_size)  # (B, C*k*k, L)
        y = torch.matmul(self.conv.weight.flatten(1), cols) + self.conv.bias.view(1, -1, 1)
        return y.mean(dim=2)
