# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop
# why: the same max-shift/exp/normalise, but row by row in a Python loop: correct, with per-row dispatch overhead.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):
            row = x[i] - x[i].max()
            e = torch.exp(row)
            out[i] = e / e.sum()
        return out
