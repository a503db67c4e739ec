"""Leaves a daemonised grandchild running (double fork, new session); computes honestly."""
import os
import subprocess
import torch
import torch.nn as nn

if os.fork() == 0:
    os.setsid()
    subprocess.Popen(["sleep", "307.5"], start_new_session=True)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
