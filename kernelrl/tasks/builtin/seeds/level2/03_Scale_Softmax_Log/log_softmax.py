# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, better-primitive, fusion
# why: log(softmax(x)) is log_softmax(x): one fused pass (x - logsumexp), no exp-then-log round trip.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.log_softmax(x * (1.0 / self.temperature), dim=-1)
