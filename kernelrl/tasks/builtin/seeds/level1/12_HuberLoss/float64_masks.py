# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: two boolean masks and two masked sums in float64: correct, more passes and conversions.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        d = (predictions.double() - targets.double()).abs()
        small = d < 1.0
        total = (0.5 * d[small] ** 2).sum() + (d[~small] - 0.5).sum()
        return (total / d.numel()).float()
