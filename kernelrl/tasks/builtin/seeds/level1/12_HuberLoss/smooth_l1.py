# kernelrl-seed
# expect: faster
# device: any
# technique: better-primitive, fusion
# why: F.smooth_l1_loss with beta=1 is exactly this Huber loss, fused into one pass with a reduction.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.smooth_l1_loss(predictions, targets, beta=1.0)
