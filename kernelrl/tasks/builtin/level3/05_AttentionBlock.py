"""Multi-head self-attention (no mask): separate q/k/v projections, softmax(QK^T / sqrt(d)) V written out, output projection."""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
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
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(b, s, d)
        return self.out_proj(out)


batch_size = 2
seq_len = 512
dim = 256
num_heads = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, num_heads]
