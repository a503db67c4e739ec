"""Linear classifier head: logits, softmax over classes, then the argmax class index."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        probs = torch.softmax(self.fc(x), dim=1)
        return torch.argmax(probs, dim=1)


batch_size = 1024
in_features = 64
num_classes = 1000


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, num_classes]
