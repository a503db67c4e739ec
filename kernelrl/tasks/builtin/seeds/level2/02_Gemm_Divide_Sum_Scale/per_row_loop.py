# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop
# why: one matrix-vector product per batch row in a Python loop, each followed by the divide, sum and scale.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * 0.02)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        out = torch.empty(x.shape[0], 1, dtype=x.dtype, device=x.device)
        for i in range(x.shape[0]):
            out[i, 0] = (torch.mv(self.weight, x[i]) / 2).sum() * self.scaling_factor
        return out
