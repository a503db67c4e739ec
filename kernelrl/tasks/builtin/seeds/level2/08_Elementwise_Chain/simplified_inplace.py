# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, in-place, fusion
# why: leaky_relu after relu is the identity and *2 then /2 cancels, so it is relu, +bias, sigmoid: three in-place passes on one buffer.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(x).add_(self.bias).sigmoid_()
