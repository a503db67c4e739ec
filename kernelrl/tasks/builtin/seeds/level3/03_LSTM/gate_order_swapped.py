# kernelrl-seed
# expect: wrong
# device: any
# technique: hoist-input-projection, bug
# why: hoists the input projection correctly but unpacks the gates as (i, f, o, g); PyTorch's order is (i, f, g, o).
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
        gx = torch.matmul(x, self.cell.weight_ih.t()) + (self.cell.bias_ih + self.cell.bias_hh)
        h = x.new_zeros(b, self.hidden_size)
        c = x.new_zeros(b, self.hidden_size)
        for step in range(t):
            gates = torch.addmm(gx[:, step], h, self.cell.weight_hh.t())
            i, f, o, g = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return self.fc(h)
