# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, sparse-dispatch
# why: the one-hot gate zeroes every expert but one per token: gather each expert's tokens, run it only on them, scatter back (~1/E of the FLOPs).
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
        probs = torch.softmax(self.router(tokens), dim=-1)
        top_p, top_i = probs.max(dim=-1)
        out = torch.zeros_like(tokens)
        order = torch.argsort(top_i)
        counts = torch.bincount(top_i, minlength=len(self.experts)).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            idx = order[start:start + n]
            start += n
            y = self.experts[e](tokens.index_select(0, idx))
            out.index_copy_(0, idx, y * top_p.index_select(0, idx).unsqueeze(-1))
        return out.view(shape)
