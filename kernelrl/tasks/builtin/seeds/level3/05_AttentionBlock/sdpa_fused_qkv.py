# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion, gemm-batching
# why: one GEMM for q, k and v (concatenated weights) and F.scaled_dot_product_attention (fused, no score matrix round trip).
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
        w = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight], dim=0)
        bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias], dim=0)
        qkv = F.linear(x, w, bias).view(b, s, 3, self.num_heads, hd).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))
