# kernelrl-seed
# expect: faster
# device: any
# technique: algebraic, dead-code
# why: softmax is monotonic per row, so argmax(softmax(z)) = argmax(z): skip the softmax entirely.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return torch.argmax(self.fc(x), dim=1)
