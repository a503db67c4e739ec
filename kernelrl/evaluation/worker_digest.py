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


# Elements of one output digested in one pass (a power-of-two multiple of DIGEST_WINDOW, so every chunk starts in
# step with the round's weights r). Why a bound: the weight buffer and the scratch for its products were each as long
# as the output, and KernelBench's largest outputs are 6-16 GiB: on an 80 GB H100 the two workers' 12 GiB of digest
# buffers beside their blocks ran them out of memory (bench/results/2026-12-06-h100-kernelbench, 24 of level 1's
# self-pairs). 2^26 float32 values are 256 MiB: outputs up to that size are digested exactly as before (one chunk).
DIGEST_CHUNK = 1 << 26


def digest_weights(n: int, dev: torch.device) -> torch.Tensor:
    """The evaluation's long weight buffer for outputs of n elements (n at most DIGEST_CHUNK: a longer output is
    digested chunk by chunk): U(-1, 1), n + DIGEST_WINDOW values, drawn once per evaluation (from the evaluation's
    seed) because a fresh n-long draw per round costs more than many forward calls on a CPU."""
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
    reference's digests for the same inputs. An output longer than DIGEST_CHUNK elements is digested chunk by
    chunk, each chunk at its own fresh random offset into F (one buffer of DIGEST_CHUNK + DIGEST_WINDOW values)
    and converted to float one chunk at a time: the weights stay on every element and differ between chunks, so
    chunks swapped or repeated are caught as before, and the digest's memory is two chunks, not two outputs. Its
    norm is then sqrt(sum of the chunks' squared norms). ``settle``: the worker's end of a held phase
    (worker._held_settle, looked up in the worker at each call, so the one the process runs is the one called)."""
    if not outs or not outs[0]:
        return [[] for _ in outs]
    dev = outs[0][0].device
    g = torch.Generator(device=dev).manual_seed(dseed % (2**62))
    pick = random.Random(dseed)

    def flat(x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if type(x) is not torch.Tensor:  # reported in the metas (the parent rejects it); digest the data
            x = x.as_subclass(torch.Tensor)
        if x.is_complex():
            x = torch.view_as_real(x)
        return x.reshape(-1)

    def as_float(x: torch.Tensor) -> torch.Tensor:
        return x if x.dtype in (torch.float32, torch.float64) else x.float()

    vals: list[list[torch.Tensor]] = [[] for _ in outs]
    for j in range(len(outs[0])):
        col = [flat(o[j]) for o in outs]
        n = max(x.numel() for x in col)
        m = min(max(n, 1), DIGEST_WINDOW)
        big = digest_weights(min(n, DIGEST_CHUNK), dev)
        r = torch.rand(m, generator=g, device=dev).mul_(2).sub_(1)
        if dev.type == "cuda" and len(col) >= 4 and len(col) * n <= DIGEST_BATCH and all(
                f.numel() == n and f.dtype == col[0].dtype for f in col):
            # Many small outputs (launch-bound tasks with hundreds of calls a round): one batched pass for the
            # round instead of ~5 kernel launches per call; the same weights as the loop below.
            X = torch.stack([as_float(f) for f in col])
            fr, rr = (big, r) if X.dtype == big.dtype else (big.to(X.dtype), r.to(X.dtype))
            # from pinned memory without a host sync: a held digest's stream is still waiting for its GO here
            offs = torch.tensor([pick.randrange(DIGEST_WINDOW) for _ in col]).pin_memory().to(dev, non_blocking=True)
            W = fr.unfold(0, n, 1)[offs] * rr.repeat((n + m - 1) // m)[:n]
            wds, norms = (X * W).sum(1), torch.linalg.vector_norm(X, dim=1)
            for i in range(len(col)):
                vals[i] += [norms[i], wds[i]]
            continue
        for i, f in enumerate(col):
            if f.numel() <= DIGEST_CHUNK:  # one chunk: the digest as it always was
                f = as_float(f)
                vals[i] += [torch.linalg.vector_norm(f), _weighted(f, big, r, m, pick.randrange(DIGEST_WINDOW))]
                continue
            sq, wd = 0.0, 0.0
            for c0 in range(0, f.numel(), DIGEST_CHUNK):
                fc = as_float(f[c0:c0 + DIGEST_CHUNK])
                sq = sq + torch.linalg.vector_norm(fc).double() ** 2
                wd = wd + _weighted(fc, big, r, m, pick.randrange(DIGEST_WINDOW)).double()
            vals[i] += [sq.sqrt(), wd]
    flat = torch.stack([v.double() for row in vals for v in row])
    if settle is not None:
        settle()  # a held digest's GPU work ends here, before the host copy waits for it
    flat = flat.cpu().tolist()
    per = 2 * len(outs[0])
    return [flat[i * per:(i + 1) * per] for i in range(len(outs))]


def _weighted(f: torch.Tensor, big: torch.Tensor, r: torch.Tensor, m: int, off: int) -> torch.Tensor:
    """sum_e f[e] * big[off + e] * r[e mod m] for a flat float output (or one chunk of one; a chunk starts at a
    multiple of DIGEST_CHUNK, itself a multiple of m, so r stays in step): the product in a reused scratch buffer,
    then folded by r's period."""
    k, dev = f.numel(), f.device
    fr, rr = (big, r) if f.dtype == big.dtype else (big.to(f.dtype), r.to(f.dtype))
    t = torch.mul(f, fr[off:off + k], out=scratch(k, f.dtype, dev))
    q = (k // m) * m
    wd = torch.dot(t[:q].view(-1, m).sum(0), rr) if q else torch.zeros((), dtype=f.dtype, device=dev)
    if q < k:
        wd = wd + torch.dot(t[q:], rr[:k - q])
    return wd


def metas(res: list[torch.Tensor]) -> list[list]:
    return [[str(o.dtype).removeprefix("torch."), list(o.shape), type(o) is torch.Tensor] for o in res]
