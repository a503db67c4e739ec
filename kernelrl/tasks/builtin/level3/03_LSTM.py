"""Single-layer LSTM over a sequence (an LSTMCell stepped in a loop from zero state), then a linear head on the last hidden state."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(input_size, hidden_size)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        b, t, _ = x.shape
        h = x.new_zeros(b, self.hidden_size)
        c = x.new_zeros(b, self.hidden_size)
        for step in range(t):
            h, c = self.cell(x[:, step], (h, c))
        return self.fc(h)


batch_size = 16
seq_len = 64
input_size = 128
hidden_size = 256
num_classes = 10


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_classes]
