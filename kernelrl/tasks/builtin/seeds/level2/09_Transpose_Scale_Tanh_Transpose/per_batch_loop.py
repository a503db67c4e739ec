# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop, layout, precision
# why: keeps both contiguous transposes, one batch element at a time in a Python loop, in float64.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(1, dim, 1) + 0.5)

    def forward(self, x):
        out = torch.empty_like(x)
        s = self.scale[0].double()
        for b in range(x.shape[0]):
            y = x[b].double().t().contiguous()
            out[b] = torch.tanh(y * s).t().contiguous().float()
        return out
