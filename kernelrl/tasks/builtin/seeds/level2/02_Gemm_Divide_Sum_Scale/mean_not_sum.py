# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, matvec, bug
# why: the matvec rewrite but with the mean of the weight rows instead of their sum (off by a factor hidden_size).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * 0.02)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        w = self.weight.mean(dim=0) * (self.scaling_factor / 2)
        return torch.mv(x, w).unsqueeze(1)
