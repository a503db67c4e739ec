# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: torch.logsumexp does the max shift, exp, sum and log in fused vectorised loops, without an exp(x - m) tensor.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.logsumexp(x, dim=-1)
