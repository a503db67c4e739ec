# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, better-algorithm
# why: splits both triangular matrices into 2x2 blocks; the lower-left block is zero, so 4 half-size GEMMs replace 8.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        n = A.shape[0]
        h = n // 2
        out = torch.zeros(n, n, dtype=A.dtype, device=A.device)
        a11, a12, a22 = A[:h, :h], A[:h, h:], A[h:, h:]
        b11, b12, b22 = B[:h, :h], B[:h, h:], B[h:, h:]
        # a11 @ b11 and a22 @ b22 are upper triangular already (exact zeros below); triu just makes that explicit
        out[:h, :h] = torch.triu(a11 @ b11)
        out[:h, h:] = torch.addmm(a11 @ b12, a12, b22)
        out[h:, h:] = torch.triu(a22 @ b22)
        return out
