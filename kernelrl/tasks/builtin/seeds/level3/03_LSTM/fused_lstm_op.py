# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, hoist-input-projection
# why: the fused torch.lstm op (what nn.LSTM calls) with the cell's own weights: input projections for all steps in one GEMM, the loop in C++.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(input_size, hidden_size)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        h0 = x.new_zeros(1, x.shape[0], self.hidden_size)
        params = [self.cell.weight_ih, self.cell.weight_hh, self.cell.bias_ih, self.cell.bias_hh]
        _, h_n, _ = torch.lstm(x, (h0, h0), params, True, 1, 0.0, False, False, True)
        return self.fc(h_n[0])
