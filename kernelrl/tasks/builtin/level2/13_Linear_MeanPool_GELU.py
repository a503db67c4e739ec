"""Per-token linear projection of a sequence, mean pooling over the sequence, then GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.proj(x)
        x = x.mean(dim=1)
        return F.gelu(x)


batch_size = 32
seq_len = 256
in_features = 256
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, seq_len, in_features)]


def get_init_inputs():
    return [in_features, out_features]
