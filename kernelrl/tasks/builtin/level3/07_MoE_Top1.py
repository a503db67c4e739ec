"""Mixture-of-experts feed-forward layer with top-1 routing, computed densely: every expert runs on every token and a one-hot gate selects."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, hidden_dim, num_experts):
        super().__init__()
        self.router = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, dim)) for _ in range(num_experts)
        )

    def forward(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        top_p, top_i = probs.max(dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            gate = (top_i == e).to(x.dtype) * top_p
            out = out + expert(x) * gate.unsqueeze(-1)
        return out


batch_size = 8
seq_len = 128
dim = 128
hidden_dim = 256
num_experts = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden_dim, num_experts]
