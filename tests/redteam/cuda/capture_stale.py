"""Under CUDA-graph capture (EvalConfig.cuda_graphs) forward records no work and returns its last eager output
(from the correctness trials): every replay then "computes" nothing and every call's output is that one stale
tensor. The digests of the replayed calls differ from the reference's for the fresh values: timing-mismatch.
Eagerly (no capture) it is an honest softmax. The output is kept in a list, not bound to an attribute: a forward
that rebinds a tensor attribute is not captured at all (version 14, worker_load.rebound_attrs), and this one would
then be timed eagerly, honest, instead of testing what a stale capture gets."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = [None]

    def forward(self, x):
        last = self.last[0]
        if torch.cuda.is_current_stream_capturing() and last is not None and last.shape == x.shape:
            return last
        self.last[0] = torch.softmax(x, dim=1)
        return self.last[0]
