"""Single-layer GRU over a sequence (a GRUCell stepped in a loop from zero state), returning every hidden state."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, x):
        b, t, _ = x.shape
        h = x.new_zeros(b, self.hidden_size)
        outputs = []
        for step in range(t):
            h = self.cell(x[:, step], h)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


batch_size = 8
seq_len = 128
input_size = 64
hidden_size = 128


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
