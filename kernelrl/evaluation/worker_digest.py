"""The worker's digests of a block's outputs (``digest_round``: ``[||x||, w . x]`` per output with fresh weights on
every element) and output metadata (``metas``); the parent compares them (compare.compare_digests). Runs inside
the worker process (kernelrl/evaluation/worker.py)."""

from __future__ import annotations

from typing import Callable

import random

import torch

from kernelrl.evaluation.worker_state import STATE


DIGEST_BATCH = 1 << 22  # outputs of a round digested in one batched pass when calls x elements stay below this


DIGEST_WINDOW = 65536  # random offsets per call into the evaluation's weight buffer; period of the round's weights


def digest_weights(n: int, dev: torch.device) -> torch.Tensor:
    """The evaluation's long weight buffer for outputs of n elements: U(-1, 1), n + DIGEST_WINDOW values, drawn
    once per evaluation (from the evaluation's seed) because a fresh n-long draw per round costs more than many
    forward calls on a CPU."""
    key = ("dbuf", n, dev.type)
    if key not in STATE:
        g = torch.Generator(device=dev).manual_seed((STATE.get("seed", 0) * 1_000_003 + n) % (2**62))
        STATE[key] = torch.rand(n + DIGEST_WINDOW, generator=g, device=dev).mul_(2).sub_(1)
    return STATE[key]


def scratch(n: int, dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    """A reused buffer for the digest's products (fresh allocations page-fault on every call on a CPU)."""
    key = ("scratch", dtype, dev.type)
    buf = STATE.get(key)
    if buf is None or buf.numel() < n:
        buf = STATE[key] = torch.empty(n, dtype=dtype, device=dev)
    return buf[:n]


def digest_round(outs: list[list[torch.Tensor]], dseed: int,
                 settle: Callable[[], None] | None = None) -> list[list[float]]:
    """Per call and output: [||x||, w . x] with a weight on EVERY element, w_e = F[off + e] * r[e mod m]: F is the
    evaluation's long random buffer (read at a fresh random offset per call) and r a fresh random vector of
    m <= 64K values per round (both U(-1, 1)). A random weighting of all elements cannot be matched from a
    subset or sampled positions of the output, and the fresh r and offsets rule out precomputing W^T w for a
    Linear layer. Three read passes per output; one host copy per round. The parent compares these with the
    reference's digests for the same inputs. ``settle``: the worker's end of a held phase (worker._held_settle,
    looked up in the worker at each call, so the one the process runs is the one called)."""
    if not outs or not outs[0]:
        return [[] for _ in outs]
    dev = outs[0][0].device
    g = torch.Generator(device=dev).manual_seed(dseed % (2**62))
    pick = random.Random(dseed)

    def prep(x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if type(x) is not torch.Tensor:  # reported in the metas (the parent rejects it); digest the data
            x = x.as_subclass(torch.Tensor)
        if x.is_complex():
            x = torch.view_as_real(x)
        x = x.reshape(-1)
        return x if x.dtype in (torch.float32, torch.float64) else x.float()

    vals: list[list[torch.Tensor]] = [[] for _ in outs]
    for j in range(len(outs[0])):
        col = [prep(o[j]) for o in outs]
        n = max(x.numel() for x in col)
        m = min(max(n, 1), DIGEST_WINDOW)
        big = digest_weights(n, dev)
        r = torch.rand(m, generator=g, device=dev).mul_(2).sub_(1)
        if dev.type == "cuda" and len(col) >= 4 and len(col) * n <= DIGEST_BATCH and all(
                f.numel() == n and f.dtype == col[0].dtype for f in col):
            # Many small outputs (launch-bound tasks with hundreds of calls a round): one batched pass for the
            # round instead of ~5 kernel launches per call; the same weights as the loop below.
            X = torch.stack(col)
            fr, rr = (big, r) if X.dtype == big.dtype else (big.to(X.dtype), r.to(X.dtype))
            # from pinned memory without a host sync: a held digest's stream is still waiting for its GO here
            offs = torch.tensor([pick.randrange(DIGEST_WINDOW) for _ in col]).pin_memory().to(dev, non_blocking=True)
            W = fr.unfold(0, n, 1)[offs] * rr.repeat((n + m - 1) // m)[:n]
            wds, norms = (X * W).sum(1), torch.linalg.vector_norm(X, dim=1)
            for i in range(len(col)):
                vals[i] += [norms[i], wds[i]]
            continue
        for i, f in enumerate(col):
            k = f.numel()
            off = pick.randrange(DIGEST_WINDOW)
            fr, rr = (big, r) if f.dtype == big.dtype else (big.to(f.dtype), r.to(f.dtype))
            t = torch.mul(f, fr[off:off + k], out=scratch(k, f.dtype, dev))
            q = (k // m) * m
            wd = torch.dot(t[:q].view(-1, m).sum(0), rr) if q else torch.zeros((), dtype=f.dtype, device=dev)
            if q < k:
                wd = wd + torch.dot(t[q:], rr[:k - q])
            vals[i] += [torch.linalg.vector_norm(f), wd]
    flat = torch.stack([v.double() for row in vals for v in row])
    if settle is not None:
        settle()  # a held digest's GPU work ends here, before the host copy waits for it
    flat = flat.cpu().tolist()
    per = 2 * len(outs[0])
    return [flat[i * per:(i + 1) * per] for i in range(len(outs))]


def metas(res: list[torch.Tensor]) -> list[list]:
    return [[str(o.dtype).removeprefix("torch."), list(o.shape), type(o) is torch.Tensor] for o in res]
