# kernelrl-seed
# expect: wrong
# device: any
# technique: broadcast, bug
# why: broadcasts A along the wrong axis (scales columns, i.e. B @ diag(A)); square inputs hide the shape error.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return B * A.unsqueeze(0)
