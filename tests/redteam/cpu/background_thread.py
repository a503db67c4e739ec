"""Starts a thread that burns CPU all the time (it should only ever slow the candidate itself)."""
import threading
import torch
import torch.nn as nn

def _burn():
    x = 0
    while True:
        x = (x * 31 + 7) % 1000003


threading.Thread(target=_burn, daemon=True).start()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
