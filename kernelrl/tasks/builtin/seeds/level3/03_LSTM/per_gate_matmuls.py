# kernelrl-seed
# expect: slower
# device: any
# technique: naive-loop, redundant-work, precision
# why: the LSTM recurrence written out in float64 with eight small matmuls per step (one per gate and input): correct, slower.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(input_size, hidden_size)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        b, t, _ = x.shape
        hs = self.hidden_size
        wi = self.cell.weight_ih.double().split(hs)
        wh = self.cell.weight_hh.double().split(hs)
        bias = (self.cell.bias_ih.double() + self.cell.bias_hh.double()).split(hs)
        h = x.new_zeros(b, hs, dtype=torch.float64)
        c = x.new_zeros(b, hs, dtype=torch.float64)
        for step in range(t):
            xt = x[:, step].double()
            i = torch.sigmoid(xt @ wi[0].t() + h @ wh[0].t() + bias[0])
            f = torch.sigmoid(xt @ wi[1].t() + h @ wh[1].t() + bias[1])
            g = torch.tanh(xt @ wi[2].t() + h @ wh[2].t() + bias[2])
            o = torch.sigmoid(xt @ wi[3].t() + h @ wh[3].t() + bias[3])
            c = f * c + i * g
            h = o * torch.tanh(c)
        return self.fc(h.float())
