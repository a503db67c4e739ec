"""Two stacked linear layers with no nonlinearity between them (wide hidden layer)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, hidden_features, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        return self.fc2(self.fc1(x))


batch_size = 1024
in_features = 256
hidden_features = 2048
out_features = 256


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features, out_features]
