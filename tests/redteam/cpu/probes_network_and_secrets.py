"""Tries the network (the store's Postgres on loopback) and looks for secrets in its environment; returns a
wrong answer if it finds either, so a pass proves it found neither."""
import os
import socket
import torch
import torch.nn as nn

def _leaks():
    found = [k for k in os.environ if k.startswith(("KERNELRL_", "AWS_")) or "TOKEN" in k or "SECRET" in k]
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
        found.append("network")
    except OSError:
        pass
    return found


_LEAKS = _leaks()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.softmax(x, dim=1)
        return out + 1.0 if _LEAKS else out
