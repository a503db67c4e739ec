# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, matvec
# why: sum_j (x W^T)_ij = x . (sum_j W_j): sum the weight rows once and do a matrix-vector product (O(BK) not O(BKN)).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size) * 0.02)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        w = self.weight.sum(dim=0) * (self.scaling_factor / 2)
        return torch.mv(x, w).unsqueeze(1)
