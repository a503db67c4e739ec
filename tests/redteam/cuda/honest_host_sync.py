"""Control, not a cheat: an honest softmax that syncs with the host once a call (``.item()``, as real models do
for a routing count or a loss). Under the held clock that sync waits out the holder's hold; with a spinning
context the wait was CPU time the host check charged as host work (an MoE seed lost 99% of its score, H100,
ninth session). With BLOCKING_SYNC the wait sleeps: the score is its real time, sync included."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.softmax(x, dim=1)
        if y[0, 0].item() < 0:  # never true: the sync is the point
            y = y * 0
        return y
