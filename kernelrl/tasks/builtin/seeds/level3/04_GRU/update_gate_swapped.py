# kernelrl-seed
# expect: wrong
# device: any
# technique: hoist-input-projection, bug
# why: hoisted projections, but the update mixes the wrong way round: h = z * n + (1 - z) * h.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, x):
        b, t, _ = x.shape
        hs = self.hidden_size
        gx = torch.addmm(self.cell.bias_ih, x.reshape(b * t, -1), self.cell.weight_ih.t()).view(b, t, 3 * hs)
        out = x.new_empty(b, t, hs)
        h = x.new_zeros(b, hs)
        for step in range(t):
            gh = torch.addmm(self.cell.bias_hh, h, self.cell.weight_hh.t())
            xr, xz, xn = gx[:, step].chunk(3, dim=1)
            hr, hz, hn = gh.chunk(3, dim=1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = z * n + (1 - z) * h
            out[:, step] = h
        return out
