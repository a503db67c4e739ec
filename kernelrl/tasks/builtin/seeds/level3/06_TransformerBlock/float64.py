# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: runs the written-out block in float64 (a copy of the module cast to double every call) and casts back.
import copy
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)

    @staticmethod
    def _layer_norm(x, ln):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias

    def forward(self, x):
        m = copy.deepcopy(self).double()
        x = x.double()
        b, s, d = x.shape
        hd = d // self.num_heads
        qkv = m.qkv(self._layer_norm(x, m.ln1)).view(b, s, 3, self.num_heads, hd).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(torch.matmul(qkv[0], qkv[1].transpose(-2, -1)) / math.sqrt(hd), dim=-1)
        x = x + m.proj(torch.matmul(attn, qkv[2]).transpose(1, 2).reshape(b, s, d))
        h = m.fc1(self._layer_norm(x, m.ln2))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
        return (x + m.fc2(h)).float()
