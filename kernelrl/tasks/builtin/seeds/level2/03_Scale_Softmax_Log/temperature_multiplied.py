# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: log_softmax, but multiplies by the temperature instead of dividing by it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.log_softmax(x * self.temperature, dim=-1)
