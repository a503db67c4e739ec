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

import time

import torch

from kernelrl.evaluation.compare import compare, judge_variation, split_sets
from kernelrl.evaluation.devshare import Opened, ShareError, export
from kernelrl.evaluation.worker_load import exact_print
from kernelrl.evaluation.worker_state import STATE, device
from kernelrl.evaluation.worker_variation import cmd_rerun

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
    mapped (nothing was compared).

    With ``sets`` (each set as cmd_rerun names it: {seed, variant}, or a timing block's {stage}) and ``out_bytes``,
    a wrong output is judged here against the reference's own variation and precision (compare.judge_variation,
    the reference run again on the set by worker_variation.cmd_rerun, all on the device): ``judged`` lists [set
    index, record] of each set so judged; a set that passes does not stop the comparison. ``unjudged``: the last
    bad set could not be judged here (the reference cannot say, or the device ran out of memory): the parent runs
    it again through the host. Why (evaluator version 20): version 19 ran every such set again with its outputs
    shipped, and KernelBench L2 3 under torch.compile (128 MiB a set, the sets past the bound within the
    reference's precision) took 105 s, 89 s of it in correctness (H200, bench/results/2026-11-28-h200x4-kernelbench,
    c33)."""
    ref = STATE.pop("kept", None)
    if ref is None:
        raise RuntimeError("no kept outputs to compare")
    rs, cs, descs = list(h["ref_structure"]), list(h["cand_structure"]), list(h["ipc"])
    if sum(rs) != len(ref) or sum(cs) != len(descs) or len(rs) != len(cs):
        raise ValueError("structures do not match the outputs")
    opened = Opened(device())
    cand: list = []
    t0 = time.perf_counter()
    times = {}  # seconds mapping, comparing and unmapping (the reply's times_s: where a cold command's compare went)
    try:
        try:
            cand = [opened.view(d) for d in descs]
        except ShareError as e:
            return {"ok": True, "ipc_failed": str(e)}, []
        times["open"] = time.perf_counter() - t0
        reply = _compare_sets(h, rs, cs, ref, cand)
        times["compare"] = time.perf_counter() - t0 - times["open"]
    finally:
        cand.clear()
        del ref
        t1 = time.perf_counter()
        opened.close()
        times["close"] = time.perf_counter() - t1
    return reply | {"times_s": {k: round(v, 4) for k, v in times.items()}}, []


def _compare_sets(h: dict, rs: list, cs: list, ref: list, cand: list) -> dict:
    """cmd_compare_kept's comparison, set by set, of mapped outputs: its reply (without the times)."""
    sets, judged = h.get("sets"), []
    for i, (r, c) in enumerate(zip(split_sets(rs, ref), split_sets(cs, cand))):
        bad = compare(r, c, rs[i], cs[i])
        if not bad:
            continue
        rec = _judge(r, c, sets[i], int(h.get("out_bytes") or 0)) if sets and bad[0] == "wrong-output" else None
        if rec is not None:
            judged.append([i, rec])
            if rec["within"] or rec["within_precision"]:
                continue
        return {"ok": True, "bad": [i, *bad], "judged": judged, "unjudged": rec is None}
    return {"ok": True, "bad": None, "judged": judged}


def _judge(ref: list, cand: list, which: dict, out_bytes: int) -> dict | None:
    """compare.judge_variation of one set here (``which``: cmd_rerun's set, a correctness set's seed and variant or
    a timing block's stage), its reruns kept on this device (cmd_rerun's outputs are this worker's tensors until a
    reply ships them); None when it cannot say, out of memory or any other failure included (the parent then asks
    the host path, which says the same or judges it)."""
    which = {k: which[k] for k in ("seed", "variant", "stage") if k in which}

    def rerun(req: dict) -> tuple[list, str | None]:
        reply, outs = cmd_rerun({**req, **which}, [])
        if not reply.get("restored"):
            return [], None
        return split_sets(reply["structure"], outs), reply.get("f64_error")

    try:
        with torch.no_grad():
            return judge_variation(ref, cand, rerun, out_bytes)
    except Exception:  # noqa: BLE001 - out of memory, a reference that fails when run again: no verdict here
        return None
    finally:
        if device().type == "cuda":
            torch.cuda.empty_cache()
