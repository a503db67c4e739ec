# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, hoist-input-projection
# why: the fused torch.gru op (what nn.GRU calls) with the cell's weights: one GEMM for all input projections, the recurrence in C++.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, x):
        h0 = x.new_zeros(1, x.shape[0], self.hidden_size)
        params = [self.cell.weight_ih, self.cell.weight_hh, self.cell.bias_ih, self.cell.bias_hh]
        out, _ = torch.gru(x, h0, params, True, 1, 0.0, False, False, True)
        return out
