# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, layout, in-place
# why: the transposes cancel: scale along the last dim with a reshaped (1, 1, D) view and tanh in place, no copies.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(1, dim, 1) + 0.5)

    def forward(self, x):
        return torch.mul(x, self.scale.view(1, 1, -1)).tanh_()
