# kernelrl-seed
# expect: faster
# device: cuda
# technique: triton, fusion
# why: one Triton program per row loads the row once, computes max, exp and sum in registers, and writes once.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    e = tl.where(mask, e, 0.0)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_stride + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        assert x.is_cuda and x.dtype == torch.float32 and x.dim() == 2
        x = x.contiguous()
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        block = triton.next_power_of_2(n_cols)
        num_warps = 8 if block >= 2048 else 4
        _softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK=block, num_warps=num_warps)
        return out
