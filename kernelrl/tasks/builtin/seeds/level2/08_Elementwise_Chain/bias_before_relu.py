# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, in-place, bug
# why: reorders the chain and adds the bias before the ReLU, so negative x + bias no longer clamps correctly.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(x + self.bias).sigmoid_()
