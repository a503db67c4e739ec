# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop, redundant-work
# why: accumulates the shifted exponentials over column blocks of 16 in a Python loop: correct, many small passes.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = x.max(dim=-1, keepdim=True).values
        total = torch.zeros_like(m)
        for j in range(0, x.shape[-1], 16):
            total += torch.exp(x[..., j:j + 16] - m).sum(dim=-1, keepdim=True)
        return (torch.log(total) + m).squeeze(-1)
