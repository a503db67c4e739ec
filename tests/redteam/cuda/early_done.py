"""The held clock's second threat (EvalConfig.clock = "held"): the holder's end event follows the worker's DONE, so
a worker that writes DONE as soon as GO arrives, before its calls, makes the holder measure next to nothing. Its
calls then run after the holder's end event, inside the parent's clock around the phase (holder request to worker
reply), which is charged beyond the reference's own round trip (held.pair_times, ``outside``). Computes honestly;
on the host or device clock the patch changes nothing."""
import sys

import torch
import torch.nn as nn

import kernelrl.evaluation.worker as _W

W = sys.modules["__main__"] if hasattr(sys.modules["__main__"], "HANDLERS") else _W
_real_begin = W._held_begin


def _begin(h):
    _real_begin(h)
    seq = W.STATE.get("held_seq")
    if seq is not None:  # DONE right behind the wait for GO, before any work of the phase
        W._stream_op(W.STATE["sem_fns"][1], W.STATE["sem"] + W.SEM_DONE, seq, "early DONE")


W._held_begin = _begin


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
