# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop, precision
# why: projects and attends one head (and one batch element) at a time in Python loops, in float64, then concatenates.
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
        xd = x.double()
        wq, bq = self.q_proj.weight.double(), self.q_proj.bias.double()
        wk, bk = self.k_proj.weight.double(), self.k_proj.bias.double()
        wv, bv = self.v_proj.weight.double(), self.v_proj.bias.double()
        rows = []
        for i in range(b):
            heads = []
            for h in range(self.num_heads):
                sl = slice(h * hd, (h + 1) * hd)
                q = F.linear(xd[i], wq[sl], bq[sl])
                k = F.linear(xd[i], wk[sl], bk[sl])
                v = F.linear(xd[i], wv[sl], bv[sl])
                a = torch.softmax(q @ k.t() / math.sqrt(hd), dim=-1)
                heads.append(a @ v)
            rows.append(torch.cat(heads, dim=-1))
        return self.out_proj(torch.stack(rows).float())
