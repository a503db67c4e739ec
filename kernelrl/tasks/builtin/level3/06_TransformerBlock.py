"""Pre-norm transformer encoder block: x + Attn(LN(x)), then x + MLP(LN(x)); norms, attention and GELU written out."""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
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
        b, s, d = x.shape
        hd = d // self.num_heads
        qkv = self.qkv(self._layer_norm(x, self.ln1)).view(b, s, 3, self.num_heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd), dim=-1)
        a = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(a)
        h = self.fc1(self._layer_norm(x, self.ln2))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.fc2(h)


batch_size = 1
seq_len = 512
dim = 256
num_heads = 8
mlp_ratio = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, num_heads, mlp_ratio]
