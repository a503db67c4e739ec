# kernelrl-seed
# expect: slower
# device: any
# technique: redundant-work
# why: clones, gathers the negative entries through a boolean mask, computes expm1 on them in float64 and scatters back.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha=1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        out = x.clone()
        neg = x <= 0
        out[neg] = (self.alpha * torch.expm1(x[neg].double())).float()
        return out
