"""Under CUDA-graph capture (EvalConfig.cuda_graphs) forward records no work and returns its last eager output
(from the correctness trials): every replay then "computes" nothing and every call's output is that one stale
tensor. The digests of the replayed calls differ from the reference's for the fresh values: timing-mismatch.
Eagerly (no capture) it is an honest softmax."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x):
        if torch.cuda.is_current_stream_capturing() and self.last is not None and self.last.shape == x.shape:
            return self.last
        self.last = torch.softmax(x, dim=1)
        return self.last
