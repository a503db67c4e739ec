# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: "simplifies" log(sum(exp(x - m))) + m into m + log1p(sum(exp(x - m))), which adds 1 to the sum: off by ~log(1+1/S).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = x.max(dim=-1, keepdim=True).values
        return (torch.log1p(torch.exp(x - m).sum(dim=-1, keepdim=True)) + m).squeeze(-1)
