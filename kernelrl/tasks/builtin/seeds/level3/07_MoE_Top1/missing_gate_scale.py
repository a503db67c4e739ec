# kernelrl-seed
# expect: wrong
# device: any
# technique: sparse-dispatch, bug
# why: sparse dispatch that forgets to scale each expert's output by its router probability.
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
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        top_i = self.router(tokens).argmax(dim=-1)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            idx = (top_i == e).nonzero(as_tuple=True)[0]
            if idx.numel():
                out.index_copy_(0, idx, expert(tokens.index_select(0, idx)))
        return out.view(shape)
