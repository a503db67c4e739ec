# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: SDPA with scale 1/sqrt(dim) (the model width) instead of 1/sqrt(head_dim): a softer attention distribution.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.num_heads
        q = self.q_proj(x).view(b, s, self.num_heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.num_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_heads, hd).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(d))
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))
