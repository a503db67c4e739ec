# kernelrl-seed
# expect: faster
# device: cuda
# technique: triton, fusion, better-primitive
# why: cuBLAS GEMMs with a Triton kernel that adds fc1's bias and applies tanh-GELU in one pass; fused layer_norm; in-place residual.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _bias_gelu_kernel(h_ptr, b_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    h = tl.load(h_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    v = h + b
    inner = 0.7978845608028654 * (v + 0.044715 * v * v * v)
    # tanh(u) = 2 * sigmoid(2u) - 1, stable for large |u|
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0
    tl.store(h_ptr + offs, 0.5 * v * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, hidden_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.norm_bias = nn.Parameter(0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        assert x.is_cuda and x.dtype == torch.float32
        h = F.layer_norm(x, (x.shape[-1],), self.norm_weight, self.norm_bias, self.eps)
        h = torch.matmul(h, self.fc1.weight.t()).contiguous()
        n = h.numel()
        block = 1024
        _bias_gelu_kernel[(triton.cdiv(n, block),)](h, self.fc1.bias.contiguous(), n, h.shape[-1], BLOCK=block)
        return F.linear(h, self.fc2.weight, self.fc2.bias).add_(x)
