# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, bug
# why: treats the conv as if every tap saw the whole image mean: ignores that each tap's window is shifted (border effects).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        m = x.mean(dim=(2, 3))  # (B, C)
        return torch.addmm(self.conv.bias, m, self.conv.weight.sum(dim=(2, 3)).t())
