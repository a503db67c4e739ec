# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, better-algorithm
# why: mean(conv(x)) = b + sum_{c,i,j} W[o,c,i,j] * mean of x's (i,j)-shifted window; window sums from one column sum minus border strips, then one small GEMM.
import torch
import torch.nn as nn


def _window_sums(s, k, dim):
    """Sums over the k windows of length n-k+1 along dim: the full sum minus the strips each window leaves out."""
    n = s.shape[dim]
    total = s.sum(dim=dim)
    out = []
    for i in range(k):
        w = total
        if i > 0:
            w = w - s.narrow(dim, 0, i).sum(dim=dim)
        if k - 1 - i > 0:
            w = w - s.narrow(dim, n - (k - 1 - i), k - 1 - i).sum(dim=dim)
        out.append(w)
    return torch.stack(out, dim=dim)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        kh, kw = self.conv.kernel_size
        ho, wo = x.shape[2] - kh + 1, x.shape[3] - kw + 1
        rows = _window_sums(x, kh, 2)  # (B, C, kh, W)
        taps = _window_sums(rows, kw, 3) / (ho * wo)  # (B, C, kh, kw)
        return torch.addmm(self.conv.bias, taps.flatten(1), self.conv.weight.flatten(1).t())
