"""Patches the worker's correctness draw in its own process (correctness input sets are drawn by each worker
from a seed since evaluator version 13): every set it draws is the same fixed one, and its outputs are cached by
that set, so it would compute once and answer every trial without work. The reference draws its own sets in its
own process: the candidate's cached answer for its fixed set is wrong for them."""
import sys

import torch
import torch.nn as nn

import kernelrl.evaluation.worker as _W

# The harness runs as ``python -m kernelrl.evaluation.worker``: the live copy is __main__, not the imported one.
W = sys.modules["__main__"] if hasattr(sys.modules["__main__"], "HANDLERS") else _W

_orig = W._draw_inputs
_fixed = {}


def _same_set(module, seed, variant, dev):
    if "x" not in _fixed:
        _fixed["x"] = _orig(module, 12345, "normal", dev)
    return _fixed["x"]


W._draw_inputs = _same_set
_answer = {}


class ModelNew(nn.Module):
    def forward(self, x):
        if "y" not in _answer:
            _answer["y"] = torch.softmax(x, dim=1)
        return _answer["y"]
