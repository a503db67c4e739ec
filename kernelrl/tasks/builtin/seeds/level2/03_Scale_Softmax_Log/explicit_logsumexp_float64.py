# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: x/T - logsumexp(x/T) written out in float64 with separate max, exp, sum and log passes.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        z = x.double() / self.temperature
        m = z.max(dim=-1, keepdim=True).values
        lse = torch.log(torch.exp(z - m).sum(dim=-1, keepdim=True)) + m
        return (z - lse).float()
