# kernelrl-seed
# expect: slower
# device: any
# technique: precision, redundant-work
# why: keeps the dense compute-every-expert formulation and does it in float64: correct, slower.
import copy

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, hidden_dim, num_experts):
        super().__init__()
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, dim)) for _ in range(num_experts)
        )

    def forward(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        top_p, top_i = probs.max(dim=-1)
        xd = x.double()
        out = torch.zeros_like(xd)
        for e, expert in enumerate(self.experts):
            gate = (top_i == e).double() * top_p.double()
            out = out + copy.deepcopy(expert).double()(xd) * gate.unsqueeze(-1)
        return out.float()
