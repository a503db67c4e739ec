# kernelrl-seed
# expect: wrong
# device: any
# technique: better-primitive, bug
# why: smooth_l1_loss with beta=0.5: a different transition point and scale than Huber with delta 1.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.smooth_l1_loss(predictions, targets, beta=0.5)
