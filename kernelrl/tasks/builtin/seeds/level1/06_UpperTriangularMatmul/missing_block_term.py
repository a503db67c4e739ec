# kernelrl-seed
# expect: wrong
# device: any
# technique: algebraic, bug
# why: the 2x2 block trick but the top-right block forgets the A12 @ B22 term (only A11 @ B12 is kept).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        n = A.shape[0]
        h = n // 2
        out = torch.zeros(n, n, dtype=A.dtype, device=A.device)
        out[:h, :h] = torch.triu(A[:h, :h] @ B[:h, :h])
        out[:h, h:] = A[:h, :h] @ B[:h, h:]
        out[h:, h:] = torch.triu(A[h:, h:] @ B[h:, h:])
        return out
