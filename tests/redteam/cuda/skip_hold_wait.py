"""The held clock's first threat (EvalConfig.clock = "held"): the worker's stream waits for the holder's GO before a
held phase, so its calls run after the hold and the holder's events after the hold time them. This one patches the
harness (it lives in the worker) to skip that wait: its calls run while the holder's chain of short spins holds the
GPU, in the chain's gaps (contexts time-slice), and the holder's events after the hold see little of them. The
chain then takes longer by what ran in its gaps, which is charged (held.pair_times, ``stretch``). Computes honestly;
on the host or device clock the patch changes nothing."""
import sys

import torch
import torch.nn as nn

import kernelrl.evaluation.worker as _W

W = sys.modules["__main__"] if hasattr(sys.modules["__main__"], "HANDLERS") else _W


def _no_wait(h):
    seq = h.get("held")
    if seq is None or "sem" not in W.STATE:
        W.STATE.pop("held_seq", None)
        return
    W.STATE["held_seq"] = int(seq)  # DONE is still written after the work: only the wait for GO is gone
    W.STATE["held_t0"] = W._perf()


W._held_begin = _no_wait


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
