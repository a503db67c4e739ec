# kernelrl-seed
# expect: faster
# device: cuda
# technique: triton, fusion
# why: one Triton program per row computes mean and variance in registers and applies the affine step in one pass.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, diff * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x):
        assert x.is_cuda and x.dtype == torch.float32
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        out = torch.empty_like(x2)
        block = triton.next_power_of_2(n_cols)
        _layernorm_kernel[(x2.shape[0],)](x2, self.weight.contiguous(), self.bias.contiguous(), out, n_cols,
                                          self.eps, BLOCK=block, num_warps=4)
        return out.view(x.shape)
