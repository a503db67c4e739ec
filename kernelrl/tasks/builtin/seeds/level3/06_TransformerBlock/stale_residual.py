# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, fusion, bug
# why: the MLP branch normalises the updated x but adds its output to the block input instead of the updated x.
import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def forward(self, x):
        b, s, d = x.shape
        hd = d // self.num_heads
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.num_heads, hd).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        y = self.proj(a.transpose(1, 2).reshape(b, s, d)) + x
        h = F.gelu(self.fc1(self.ln2(y)), approximate="tanh")
        return self.fc2(h).add_(x)
