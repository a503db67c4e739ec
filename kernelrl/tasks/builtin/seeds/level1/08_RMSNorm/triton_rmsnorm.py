# kernelrl-seed
# expect: faster
# device: cuda
# technique: triton, fusion
# why: one Triton program per row: sum of squares, rsqrt and the weight multiply in registers, one read and one write.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    ms = tl.sum(x * x, axis=0) / n_cols
    r = 1.0 / tl.sqrt(ms + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * r * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        assert x.is_cuda and x.dtype == torch.float32
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        out = torch.empty_like(x2)
        _rmsnorm_kernel[(x2.shape[0],)](x2, self.weight.contiguous(), out, n_cols, self.eps,
                                        BLOCK=triton.next_power_of_2(n_cols), num_warps=4)
        return out.view(x.shape)
