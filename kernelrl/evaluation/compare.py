"""Output comparison, the parent's (trusted) side of correctness and of the timed blocks' checks: per-dtype
tolerances, an elementwise and a relative-norm bound (``compare``), and the digests of timed outputs
(``compare_digests``)."""

from __future__ import annotations

import contextlib
import math
import os

import torch


# Tolerances per dtype: elementwise |a-b| <= atol * max(1, rms(b)) + rtol * |b|, and ||a-b|| / ||b|| <= rel_norm.
# The absolute part scales with the output's RMS: a legitimate reordering (a matrix chain evaluated right to left)
# errs by ~1e-6 of the output's scale, which is far above 1e-4 in absolute terms when outputs are in the
# thousands. The relative-norm bound is what keeps near-constant or near-zero outputs from passing.
TOLERANCES = {
    torch.float64: (1e-7, 1e-6, 1e-7),
    torch.float32: (1e-4, 1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2, 5e-3),
    torch.bfloat16: (5e-2, 5e-2, 2e-2),
}


# Digest tolerance per output dtype: a legitimate candidate's ||out - ref|| stays below DIGEST_REL * ||ref||.
DIGEST_REL = {"float64": 1e-4, "float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}


def compare_digests(hr: dict, hc: dict, calls: list[int] | None = None) -> str | None:
    try:
        return _compare_digests(hr, hc, calls)
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
        return f"malformed timing reply ({type(e).__name__})"


def _compare_digests(hr: dict, hc: dict, calls: list[int] | None) -> str | None:
    """Timing blocks: the candidate's outputs (structure, dtypes, shapes, exact type) must match the reference's
    for the same inputs in every call, and the digests of the sampled ``calls`` (every call when None; the
    parent's own list, never the worker's) must agree. Digest per output: [||x||, w . x] with fresh random
    weights w ~ U(-1/2, 1/2) on every element (see worker._digest_round). With d = out - ref and
    ||d|| <= rel ||ref||, |w . d| ~ 0.29 ||d|| stays small; a cheat with ||d|| >= 1% of ||ref|| is caught in
    nearly every sampled call."""
    if hr.get("structure") != hc.get("structure"):
        return f"output structure {hc.get('structure')} != reference {hr.get('structure')}"
    cm = hc.get("metas")
    if not isinstance(cm, list) or len(cm) != len(hr.get("metas") or []):
        return "output metadata missing"
    for call, (mr, mc) in enumerate(zip(hr["metas"], cm)):
        if not isinstance(mc, list) or len(mc) != len(mr):
            return f"call {call}: output metadata missing"
        for o, (a, b) in enumerate(zip(mr, mc)):
            if list(a[:2]) != list(b[:2]):
                return f"call {call}: output {o} is {b[0]}{b[1]}, reference {a[0]}{a[1]}"
            if b[2] is not True:
                return f"call {call}: output {o} is not a plain torch.Tensor"
    idx = list(range(len(hr["metas"]))) if calls is None else list(calls)
    digests_c = hc.get("digests")
    if not isinstance(digests_c, list) or len(digests_c) != len(hr["digests"]) or len(idx) != len(digests_c):
        return "digests missing"
    for call, dr, dc in zip(idx, hr["digests"], digests_c):
        mr = hr["metas"][call]
        if not isinstance(dc, list) or len(dr) != len(dc):
            return f"call {call}: digest length differs"
        for o, j in enumerate(range(0, len(dr), 2)):
            r_norm, r_w = dr[j:j + 2]
            c_norm, c_w = (float(x) for x in dc[j:j + 2])
            for name, r, c in (("norm", r_norm, c_norm), ("weighted sum", r_w, c_w)):
                if not math.isfinite(r):  # non-finite reference values: the candidate must have them too
                    if not (math.isnan(r) and math.isnan(c)) and r != c:
                        return f"call {call}: output {o}: non-finite values differ from the reference"
                elif not math.isfinite(c):
                    return f"call {call}: output {o}: non-finite output where the reference is finite"
            if not math.isfinite(r_norm) or not math.isfinite(r_w):
                continue
            rel = DIGEST_REL.get(mr[o][0], 1e-3)
            floor = 1e-6 * math.sqrt(max(math.prod(mr[o][1]), 1))  # a reference of (near) zeros: tiny slack
            if abs(c_norm - r_norm) > 2 * rel * r_norm + floor:
                return f"call {call}: output {o}: output norm {c_norm:.6g} != reference {r_norm:.6g}"
            if abs(c_w - r_w) > 2 * rel * r_norm + floor:
                return (f"call {call}: output {o}: weighted digest {c_w:.6g} != reference {r_w:.6g} "
                        f"(outputs differ from the reference on the same inputs)")
    return None


def split_sets(structure: list[int], outs: list) -> list[list]:
    """A flat list of outputs cut into per-set lists (``structure``: how many outputs each set has)."""
    res, i = [], 0
    for n in structure:
        res.append(outs[i:i + n])
        i += n
    return res


def compare(ref: list[torch.Tensor], cand: list[torch.Tensor], ref_structure, cand_structure) -> tuple[str, str] | None:
    """None if the candidate's outputs match; else (flag, reason)."""
    if ref_structure != cand_structure or len(ref) != len(cand):
        return "shape-mismatch", f"output structure {cand_structure} != reference {ref_structure}"
    for i, (r, c) in enumerate(zip(ref, cand)):
        if r.shape != c.shape or r.dtype != c.dtype:
            return "shape-mismatch", f"output {i}: {c.dtype}{list(c.shape)} != reference {r.dtype}{list(r.shape)}"
        if not r.is_floating_point():
            # Integer/bool outputs match exactly, but for one element per thousand (rounded down): an argmax over
            # a softmax of near-equal logits is decided by the reference's own rounding (the "tiny inputs" trial
            # of a Gemm_Softmax_Argmax task flipped 3.4e-5 of its rows for argmax over the logits, an honest and
            # exact rewrite: one 1024-row trial in 30 failed). One index in a thousand buys no speed.
            n_bad = int((r != c).sum())
            if n_bad > r.numel() // 1000:
                return "wrong-output", f"output {i}: integer/bool values differ ({n_bad} elements)"
            continue
        bad = _compare_floats(i, r.reshape(-1), c.reshape(-1))  # 1-D: a 0-dim output (a loss) indexes too
        if bad:
            return bad
    return None


def output_diff(a: list, b: list) -> tuple[float, float]:
    """Relative error norm and largest absolute difference of outputs ``a`` against ``b`` (floating outputs of
    equal shapes; non-finite positions left out): reference_variation's numbers, not a verdict."""
    num = den = mx = 0.0
    for x, y in zip(a, b):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.is_floating_point()
                and x.shape == y.shape):
            continue
        x, y = x.reshape(-1), y.reshape(-1)
        ok = torch.isfinite(x) & torch.isfinite(y)
        d = (x[ok].double() - y[ok].double())
        num += float(d.pow(2).sum())
        den += float(y[ok].double().pow(2).sum())
        mx = max(mx, float(d.abs().max()) if d.numel() else 0.0)
    return (math.sqrt(num / den) if den > 0 else math.sqrt(num)), mx


# A wrong output passes when the reference varies as much against itself on the same inputs (two more runs, its
# state restored before each: correctness.reference_variation): the candidate's relative error norm and its largest
# difference each within VARIATION_FACTOR x the reference's own, the norm also within VARIATION_CAP x the dtype's
# bound, and NaN/inf in the same places. Why: KernelBench level 2 77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool
# failed against itself at 1.4e-4 > 1e-4 while two runs of its reference on that set differed by 1.7e-4 (H200;
# bench/results/2026-11-28-h200x4-kernelbench): cuDNN's non-deterministic algorithms with TF32 off vary 7-9e-6
# run to run on get_inputs (0 with cudnn.deterministic), and a global pool of near-cancelling values makes that a
# large share of a small norm. The factor leaves room for a third sample of the same noise; the cap keeps a
# noisy reference from passing anything: float32's 1e-4 bound never loosens past 1e-3.
VARIATION_FACTOR = 3.0
VARIATION_CAP = 10.0


# Or it passes when it is as close to the exact answer as float32 arithmetic gets on this problem: the candidate's
# outputs against the reference's run in float64 on the same inputs, within PRECISION_FACTOR x the largest error of
# the reference's own float32 answers against float64 over PRECISION_SAMPLES samples (the set, and the set with its
# inputs moved by an ulp: worker_variation._precision_runs), in norm and in largest difference; and within
# PRECISION_MAX_REL of the norm of the float64 answer or of the reference's. For a reference that reproduces
# itself within the dtype's bound (its two runs); one that varies more, up to VARIATION_CAP x it, at
# NOISY_PRECISION_FACTOR (below): its float64 run can carry its noise, and the gap then measures the noise, not the
# precision (a reference adding 1e-3 of random noise passed its own copy at 8x); and only for a forward that does not
# draw random numbers (its answer with the generators elsewhere within the bound, or the reference's own variation):
# a dropout's float64 run draws other masks, and the gap would allow half a norm.
# Why: a deterministic reference has no run-to-run variation to allow for, yet on a near-cancelling reduction its
# float32 answer is itself far from exact. KernelBench L1 98_KLDivLoss on the evaluator's "small" inputs
# (near-uniform distributions): its float32 answer was 13%-140% off the float64 one over three draws (CPU, full size;
# both share log()'s rounding, the dominant error), and an honest reordering of the sum 0.2-0.7% off the reference
# (torch.compile's on the H200: 0.25%), past float32's 1e-4 bound. On such a set float32 cannot tell a right answer
# from a wrong one more finely than that. The allowance follows the problem's conditioning on those inputs, which a
# candidate cannot choose; every set must pass, so a candidate sloppy everywhere still fails on the well-conditioned
# ones, where 8 x ~1e-7 is far inside the bound (tests/test_reference_variation.py).
# Why 8: rounding errors are random; with normal errors a candidate as accurate as the reference exceeds 8 x the
# largest of 4 samples in ~3e-4 of sets (4 x: 4e-3; a simulation). Why 0.5: a set whose float32 answer is pure
# rounding (KL of near-identical distributions: 6-8x its exact value) would otherwise pass zeros or a flipped sign
# (1 and 2 norms from both); an honest reordering there was within 4% of the reference, or (once in 17 CPU
# evaluations) 1.3% from the float64 answer and 1.45 norms from the reference's.
PRECISION_FACTOR = 8.0
PRECISION_MAX_REL = 0.5
# Version 20: a reference that varies run to run past the dtype's bound but within VARIATION_CAP x it is judged too,
# tighter: the candidate no further from the float64 answer than NOISY_PRECISION_FACTOR x the reference's own
# float32 answers are (their noise included), in norm and in largest difference. Why: KernelBench L2
# 77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool under torch.compile (both modes, H200, c34) failed at 6.4e-4
# from the reference, 3.2x the reference's own run-to-run 2e-4 (past VARIATION_FACTOR), while it was 3.1e-4 from
# the float64 answer and the reference itself 5.4e-4: more accurate than the reference, and failed. cuDNN's
# non-deterministic float32 sums are the noise; the float64 run's own is at float64's rounding. Why 2, not 8: a noisy
# reference's float64 run can carry its noise (a source no seed reaches), and the samples then measure noise, not
# precision; at 2x, an error 5x the reference's noise beside it still fails
# (tests/test_reference_variation.py), and at 1x an honest candidate exactly as noisy would fail one set in five.
NOISY_PRECISION_FACTOR = 2.0


def within_precision(ref: list, cand: list, runs: list[list], ref_runs: tuple[float, float],
                     cand_ref: tuple[float, float]) -> tuple[bool, tuple[float, float], tuple[float, float]]:
    """(passes, the reference's largest (relative error norm, max |diff|) against float64 over the samples, the
    candidate's against the set's float64 answer): see PRECISION_FACTOR. ``runs``: the set's float32 outputs with
    the random generators elsewhere, its float64 outputs, then pairs of (float32, float64) outputs on nudged inputs
    (worker_variation._precision_runs); ``ref_runs``: output_diff of the reference's two float32 runs of the set;
    ``cand_ref``: output_diff(cand, ref)."""
    other, exact = runs[0], runs[1]
    samples = [output_diff(ref, exact)] + [output_diff(runs[j], runs[j + 1]) for j in range(2, len(runs) - 1, 2)]
    r = (max(x[0] for x in samples), max(x[1] for x in samples))
    c = output_diff(cand, exact)
    if any(len(o) != len(ref) or any(isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                                     and x.shape != y.shape for x, y in zip(o, ref)) for o in runs):
        return False, r, c
    floats = [x.dtype for x in ref if isinstance(x, torch.Tensor) and x.is_floating_point()]
    bound = min((TOLERANCES.get(d, TOLERANCES[torch.float32])[2] for d in floats), default=0.0)
    noisy = ref_runs[0] > bound  # NOISY_PRECISION_FACTOR; past the cap, the reference cannot judge anything
    # the run with the generators elsewhere: a forward that draws (dropout) differs by far more than the noise
    if (ref_runs[0] > VARIATION_CAP * bound or output_diff(other, ref)[0] > max(bound, VARIATION_FACTOR * ref_runs[0])
            or min(cand_ref[0], c[0]) > PRECISION_MAX_REL):
        return False, r, c
    return within_variation(ref, cand, r, c, math.inf, NOISY_PRECISION_FACTOR if noisy else PRECISION_FACTOR), r, c


def within_variation(ref: list, cand: list, ref_diff: tuple[float, float], cand_diff: tuple[float, float],
                     cap_factor: float = VARIATION_CAP, factor: float = VARIATION_FACTOR) -> bool:
    """True when ``cand`` is as close to ``ref`` (``cand_diff``: output_diff(cand, ref)) as the reference's two
    runs are to each other (``ref_diff``: output_diff of the runs) within ``factor`` (VARIATION_FACTOR), the norm
    never past ``cap_factor`` x the dtype's bound; non-floating outputs must pass ``compare`` as they are."""
    floats = [i for i, r in enumerate(ref) if isinstance(r, torch.Tensor) and r.is_floating_point()]
    rest = [i for i in range(len(ref)) if i not in floats]
    if len(ref) != len(cand) or compare([ref[i] for i in rest], [cand[i] for i in rest], 0, 0):
        return False
    for i in floats:
        r, c = ref[i], cand[i]
        if not isinstance(c, torch.Tensor) or c.shape != r.shape or c.dtype != r.dtype:
            return False
        if not torch.equal(torch.isfinite(r), torch.isfinite(c)):
            return False
    if not floats:
        return False
    (v_rel, v_max), (c_rel, c_max) = ref_diff, cand_diff
    cap = cap_factor * min(TOLERANCES.get(ref[i].dtype, TOLERANCES[torch.float32])[2] for i in floats)
    return v_rel > 0 and c_rel <= factor * v_rel and c_max <= factor * v_max and c_rel <= cap


# The precision runs (a float64 copy, 7 more outputs of the set, float64 ones twice the bytes) only for outputs up to
# this size a set: on the host path they cross the pipes, ~13x a set's bytes in all; on the device they are memory.
PRECISION_MAX_OUT_BYTES = 256 * 1024 * 1024


def judge_variation(ref: list, cand: list, rerun, out_bytes: int) -> dict | None:
    """A wrong output (one set's ``ref`` and ``cand`` outputs) judged against the reference's own variation, then
    its precision: ``rerun(req)`` sends the reference worker_variation.cmd_rerun's request ``req`` on the set (two
    runs, or the precision runs) and returns (its output sets, f64_error or None); no sets when it cannot say.
    The record ``timing.reference_variation`` keeps (without ``sets_passed``), or None when the reference cannot say.
    The same on either side: the parent judges shipped outputs (correctness.reference_variation), the reference's
    worker outputs it compared on the device (worker_share.cmd_compare_kept; evaluator version 20)."""
    runs, _ = rerun({"runs": 2})
    if len(runs) != 2:
        return None
    v, c = output_diff(runs[1], runs[0]), output_diff(cand, ref)
    within = within_variation(ref, cand, v, c)
    del runs
    precise, r64, c64, f64_error = False, None, None, None
    if not within and out_bytes <= PRECISION_MAX_OUT_BYTES:
        runs64, f64_error = rerun({"runs": 0, "f64": True})
        if len(runs64) > 2:
            precise, r64, c64 = within_precision(ref, cand, runs64, v, c)
    return {"ref_rel_norm": v[0], "ref_max_abs": v[1], "cand_rel_norm": c[0], "cand_max_abs": c[1], "within": within,
            "ref_f64_rel_norm": r64 and r64[0], "ref_f64_max_abs": r64 and r64[1], "cand_f64_rel_norm": c64 and c64[0],
            "cand_f64_max_abs": c64 and c64[1], "within_precision": precise, "f64_error": f64_error}


@contextlib.contextmanager
def one_cpu_thread():
    """The parent's comparisons on one CPU thread: with torch's pool of one thread per core on the 16-core H100
    host, while spare workers started on those cores, comparing 20 trials of 2M floats took 2.5-3.7 s instead of
    0.2 s (pool threads waiting on each other); chunked single-threaded comparison is fast enough."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


COMPARE_CHUNK = 1 << 17  # elements per step: temporaries stay under 1 MB (no fresh mmap + page faults per op)
# Outputs of this many elements or more (128 MB of float32) are compared on several threads in bigger chunks, on
# hosts of BIG_COMPARE_MIN_CORES cores or more. Measured for 1 GiB of float32 on a 16-core H100 VM: one thread in
# 128K-element chunks 3.1 s, 8 threads in 1M-element chunks 1.0 s (4 threads 1.5 s; 8M-element chunks 2.7 s: their
# temporaries are fresh mmaps, page-faulted op after op). On a 2-core VM two threads took 5x longer than one, so small
# hosts keep one thread, and so do smaller outputs (one_cpu_thread: a pool of one thread per core contended with
# starting workers). Same tolerance logic either way; only the chunking (and so the float64 summation order of the
# norms, ~1e-16 relative) differs.
BIG_OUTPUT_ELEMS = 32 * 1024 * 1024
BIG_COMPARE_CHUNK = 1 << 20
BIG_COMPARE_THREADS = 8  # at most, and at most half the host's cores
BIG_COMPARE_MIN_CORES = 8


def big_compare_threads() -> int:
    cores = os.cpu_count() or 1
    return min(BIG_COMPARE_THREADS, cores // 2) if cores >= BIG_COMPARE_MIN_CORES else 1


@contextlib.contextmanager
def _big_compare_threads():
    """torch's intra-op pool at big_compare_threads() for one huge comparison, restored after."""
    before = torch.get_num_threads()
    want = big_compare_threads()
    if want == before:
        yield
        return
    torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# On a GPU (outputs compared in the reference's worker, worker_share.py) chunks are this many elements: each
# chunk's verdicts read back to the host (a sync), so small chunks would cost ~5 syncs per 128K elements; 64M
# float32 elements keep the chunk's temporaries near 1 GB on cards of 80 GB and more.
DEVICE_COMPARE_CHUNK = 1 << 26


def _compare_floats(i: int, r: torch.Tensor, c: torch.Tensor) -> tuple[str, str] | None:
    if r.device.type == "cuda":
        return _compare_floats_chunked(i, r, c, DEVICE_COMPARE_CHUNK)
    if r.numel() >= BIG_OUTPUT_ELEMS and big_compare_threads() > 1:
        with _big_compare_threads():
            return _compare_floats_chunked(i, r, c, BIG_COMPARE_CHUNK)
    return _compare_floats_chunked(i, r, c, COMPARE_CHUNK)


def _compare_floats_chunked(i: int, r: torch.Tensor, c: torch.Tensor, chunk: int) -> tuple[str, str] | None:
    """Output ``i`` (flat, same shape and dtype): finiteness, elementwise tolerance and relative error norm.
    float32 arithmetic for float32/16/bf16 outputs (exact upcasts; the difference of two close float32 values is
    exact): no float64 copies of outputs that can be gigabytes. Done in chunks: whole-output temporaries of many
    MB are fresh mmaps whose page faults made one comparison of 2M floats take 170 ms instead of 20 on a VM."""
    work = torch.float64 if r.dtype == torch.float64 else torch.float32
    atol, rtol, rel_norm = TOLERANCES.get(r.dtype, TOLERANCES[torch.float32])
    n = r.numel()
    ref_sq, all_finite, m = 0.0, True, 0  # m: the reference's finite elements
    for s0 in range(0, n, chunk):
        rf, cf = r[s0:s0 + chunk].to(work), c[s0:s0 + chunk].to(work)
        ref_finite, cand_finite = torch.isfinite(rf), torch.isfinite(cf)
        if not torch.equal(ref_finite, cand_finite):
            return "non-finite", f"output {i}: NaN/inf where the reference has finite values (or vice versa)"
        if not bool(ref_finite.all()):
            all_finite = False
            if not torch.equal(rf[~ref_finite].nan_to_num(), cf[~ref_finite].nan_to_num()):
                return "wrong-output", f"output {i}: non-finite values differ"
            rf = rf[ref_finite]
        m += rf.numel()
        ref_sq += float(torch.linalg.vector_norm(rf, dtype=torch.float64)) ** 2
    denom = math.sqrt(ref_sq)
    scale = max(1.0, denom / math.sqrt(max(m, 1)))
    diff_sq, n_bad, first = 0.0, 0, None
    for s0 in range(0, n, chunk):
        rf, cf = r[s0:s0 + chunk].to(work), c[s0:s0 + chunk].to(work)
        if not all_finite:
            keep = torch.isfinite(rf)
            rf, cf = rf[keep], cf[keep]
        diff = (rf - cf).abs_()
        bad = diff > rf.abs().mul_(rtol).add_(atol * scale)
        nb = int(bad.sum())
        if nb and first is None:
            j = int(bad.nonzero()[0, 0])
            first = (float(cf[j]), float(rf[j]))
        n_bad += nb
        diff_sq += float(torch.linalg.vector_norm(diff, dtype=torch.float64)) ** 2
    if n_bad:
        return "wrong-output", (f"output {i}: {n_bad}/{m} elements out of tolerance "
                                f"(first: got {first[0]:.6g}, expected {first[1]:.6g})")
    num = math.sqrt(diff_sq)
    if denom > 0 and num / denom > rel_norm:
        return "wrong-output", f"output {i}: relative error norm {num / denom:.3g} > {rel_norm:g}"
    if denom == 0 and num > atol * math.sqrt(max(m, 1)):
        return "wrong-output", f"output {i}: reference is zero, candidate is not"
    return None
