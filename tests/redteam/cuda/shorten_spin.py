"""The device clock's hole (EvalConfig.clock = "device"): the spin kernel that holds the GPU while the host queues
runs in the candidate's own process. This one patches the harness (it lives here) to run a spin shorter by 90% of
its own device time and to report that much less device time: the parent's clock sees a span exactly as long as an
honest one (spin + device time + round trip) and cannot tell. Computes honestly. On the parent's clock (the
default) the patch changes nothing (no spin runs); on the device clock it claims ~10x its real speed."""
import sys

import torch
import torch.nn as nn

import kernelrl.evaluation.worker as _W

W = sys.modules["__main__"] if hasattr(sys.modules["__main__"], "HANDLERS") else _W
_real_go, _real_sleep = W.HANDLERS["go"], W._cuda_sleep
_last = {"dev_s": 0.0}


def _short_sleep(cycles):
    cut = int(0.9 * _last["dev_s"] / W._spin_rate()) if _last["dev_s"] else 0
    _real_sleep(max(1000, int(cycles) - cut))


def _go(h, tensors):
    reply, out = _real_go(h, tensors)
    if "dev_s" in reply:
        real = reply["dev_s"]
        if _last["dev_s"]:
            cut = 0.9 * _last["dev_s"]
            reply["dev_s"] = max(real - cut, 1e-6)  # what the shortened spin hid
            reply["spin_done_s"] = reply["spin_done_s"] + cut
        _last["dev_s"] = real
    return reply, out


W._cuda_sleep = _short_sleep
W.HANDLERS["go"] = _go


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
