# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop, redundant-work, precision
# why: the GRU recurrence in float64 with six separate small matmuls per step and list-then-stack output: correct, slower.
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
        wir, wiz, win = self.cell.weight_ih.double().split(hs)
        whr, whz, whn = self.cell.weight_hh.double().split(hs)
        bir, biz, bin_ = self.cell.bias_ih.double().split(hs)
        bhr, bhz, bhn = self.cell.bias_hh.double().split(hs)
        h = x.new_zeros(b, hs, dtype=torch.float64)
        outputs = []
        for step in range(t):
            xt = x[:, step].double()
            r = torch.sigmoid(xt @ wir.t() + bir + h @ whr.t() + bhr)
            z = torch.sigmoid(xt @ wiz.t() + biz + h @ whz.t() + bhz)
            n = torch.tanh(xt @ win.t() + bin_ + r * (h @ whn.t() + bhn))
            h = (1 - z) * n + z * h
            outputs.append(h)
        return torch.stack(outputs, dim=1).float()
