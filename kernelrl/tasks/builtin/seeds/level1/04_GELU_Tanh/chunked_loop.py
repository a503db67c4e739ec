# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop, precision
# why: evaluates the formula in float64 on blocks of 64 rows in a Python loop: correct but slower.
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        c = math.sqrt(2.0 / math.pi)
        for i in range(0, x.shape[0], 64):
            xb = x[i:i + 64].double()
            out[i:i + 64] = (0.5 * xb * (1.0 + torch.tanh(c * (xb + 0.044715 * xb * xb * xb)))).float()
        return out
