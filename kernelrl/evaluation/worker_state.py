"""The worker process's state between commands: one dict, shared by worker.py and its helper modules
(worker_inputs.py, worker_digest.py). Module, model, device, seed, staged inputs, the last round's outputs,
scratch buffers, the held clock's events and phase numbers; and the host heap a block's outputs need, faulted in
ahead (``prefault``)."""

from __future__ import annotations

import torch

STATE: dict = {"ext_builds": [], "ext_failures": []}


def device() -> torch.device:
    return torch.device(STATE.get("device", "cpu"))


def host_bytes(outs) -> int:
    """What a block's outputs took in host memory, plus its largest output (a call's temporaries): the heap a
    block of the same size needs."""
    sizes = [t.numel() * t.element_size() for o in outs for t in (o if isinstance(o, (tuple, list)) else [o])
             if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
    return sum(sizes) + max(sizes, default=0)


PREFAULT_CHUNK = 8 << 20  # below the 32 MB mmap threshold (sandbox.scrubbed_env): these come from the heap


def prefault(nbytes: int) -> None:
    """CPU, harness time: touch ``nbytes`` of free heap and free it again (it stays in the heap: the trim
    threshold is 1 GB), so the block's outputs land on pages already faulted in. On a CPU VM a page's first touch
    costs ~10 us: a span whose outputs grew the heap ran 2-4x longer (4,096-40,960 faults in 10 ms spans), in the
    candidate's early blocks and now and then later, as the staged inputs shifted the heap's layout."""
    chunks = []
    while nbytes > 0:
        n = min(PREFAULT_CHUNK, nbytes)
        chunks.append(torch.ones(n, dtype=torch.uint8))
        nbytes -= n
    del chunks
