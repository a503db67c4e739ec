"""Outputs compared on the device (worker side): a request with ``keep`` leaves its outputs in the worker instead of
sending them (``keep_outputs``); the candidate's worker also exports them (``export``: CUDA IPC handles,
devshare.py); the reference's worker then maps the candidate's outputs and compares them with its own kept ones,
on the GPU, with the parent's comparison (compare.compare), and replies with the verdict (``cmd_compare_kept``).

Why: outputs of gigabytes (KernelBench's softmax and sigmoid: 6.4 GB a set) took minutes to cross the host (device to
host copy, the pipe or memfd, a CPU comparison), and the self-pairs gave no answer in 150 s
(bench/results/2026-11-28-h200x2-evaluator-v13c). What stays the same: every element is compared with the same
tolerances, by our code (the reference's worker runs only the task's reference and this harness); the candidate is
frozen (SIGSTOP, session.hold) while the reference's worker reads its memory, so what is compared is what it
returned. Only the candidate's memory is ever exported, and only our reference worker maps it: a mapping can be
written through, so no handle of the reference's memory is ever given to a candidate. A descriptor that cannot
be mapped (IPC unavailable, or a hostile one) is answered ``ipc_failed`` and the parent compares through the host
as before: refusing the device path gains a candidate nothing but time."""

from __future__ import annotations

import torch

from kernelrl.evaluation.compare import compare, split_sets
from kernelrl.evaluation.devshare import Opened, ShareError, export
from kernelrl.evaluation.worker_load import exact_print
from kernelrl.evaluation.worker_state import STATE, device

def release() -> None:
    """Drop outputs kept by an earlier request (before the next one runs: the memory is the task's to use)."""
    STATE.pop("kept", None)


def keep_outputs(h: dict, reply: dict, out: list) -> tuple[dict, list]:
    """Header ``keep``: the handler's outputs stay here (contiguous copies where they were not) and the reply says
    their shapes and dtypes (``out_meta``); ``prints``: their exact prints too (worker_load.exact_print, for the
    parent's task audit: identical outputs for different inputs, without shipping them); ``export``: CUDA IPC
    descriptors of them (``ipc``), or ``ipc_error`` when they cannot be exported (the parent then asks again
    with shipping)."""
    if not reply.get("ok", True):
        return reply, out
    kept = []
    for t in out:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"an output is a {type(t).__name__}, not a tensor")
        kept.append(t.detach().contiguous())
    STATE["kept"] = kept
    reply["out_meta"] = [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in kept]
    if h.get("prints"):
        reply["prints"] = [exact_print(t) for t in kept]
    if h.get("export"):
        if device().type == "cuda":
            torch.cuda.synchronize()  # the copies made contiguous above, done before another process reads them
        try:
            reply["ipc"] = [export(t) for t in kept]
        except ShareError as e:
            reply["ipc_error"] = str(e)
    return reply, []


def cmd_compare_kept(h, _tensors):
    """Reference worker: the candidate's exported outputs (``ipc``, per set as ``cand_structure`` says) mapped and
    compared on the device with this worker's kept outputs of the same sets (``ref_structure``). Reply: ``bad``
    = [set index, flag, reason] of the first mismatch, or None; ``ipc_failed`` when a descriptor cannot be
    mapped (nothing was compared)."""
    ref = STATE.pop("kept", None)
    if ref is None:
        raise RuntimeError("no kept outputs to compare")
    rs, cs, descs = list(h["ref_structure"]), list(h["cand_structure"]), list(h["ipc"])
    if sum(rs) != len(ref) or sum(cs) != len(descs) or len(rs) != len(cs):
        raise ValueError("structures do not match the outputs")
    opened = Opened(device())
    cand: list = []
    try:
        try:
            cand = [opened.view(d) for d in descs]
        except ShareError as e:
            return {"ok": True, "ipc_failed": str(e)}, []
        for i, (r, c) in enumerate(zip(split_sets(rs, ref), split_sets(cs, cand))):
            bad = compare(r, c, rs[i], cs[i])
            if bad:
                return {"ok": True, "bad": [i, *bad]}, []
        return {"ok": True, "bad": None}, []
    finally:
        cand.clear()
        del ref
        opened.close()
