# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: relu6(x) / 6 forgets the +3 shift (hardsigmoid is relu6(x + 3) / 6).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.relu6(x) / 6.0
