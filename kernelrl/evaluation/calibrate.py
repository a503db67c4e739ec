"""Phase 1, calibration (before any candidate code exists): the reference's output shapes, the fixed cost of an
empty timed span, the calls per span (k) and the reference's own time per call; on the held clock its CUDA
graphs. Also the candidate's graphs (after its correctness trials) and the per-run time limit."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.placement import host_free_bytes
from kernelrl.evaluation.result import EvaluatorError
from kernelrl.evaluation.session_held import reply_seconds
from kernelrl.evaluation.spares import held_clock

if TYPE_CHECKING:
    from kernelrl.evaluation.session import Session


# Calls per timed span (k) are chosen so the reference's span takes about this long: the fixed round trip and
# device-wide sync (~0.05 ms, measured and subtracted) and its jitter stay under 1% of it, per-call jitter averages
# over k calls, and a pair of spans (reference, candidate) lies within ~25 ms, so the machine's slow drifts hit both
# alike.
TARGET_ROUND_MS = 10.0


# Calibration keeps the device busy with the reference's spans at least this long before k is fixed: an idle GPU runs
# at a fraction of its clock for the first tens of ms, and a k calibrated then gave spans of half the target on the
# H100.
WARMUP_MS = 100.0


# clock='device': the spin kernel before a span lasts this many times the host's queueing time of the span's calls
# (+0.2 ms). 1.5 left the GPU waiting for the host in some spans (35% and 76% between repeats); 3 gave 18 of 20 pairs
# within 2%. Longer spins cost timing time, not accuracy.
DEVICE_SPIN_FACTOR = 3.0


# Paired spans per block: inputs for all of them are staged once and digested once per block. The statistics treat a
# block as the independent unit: on the H100 the spans of one block agreed within ~2% while the level moved by up to
# 20% between blocks, so more, smaller blocks average that out (2: ~70% of the time in timed spans with 10 ms spans; 8
# gave ~10 blocks per evaluation and 15% between repeats).
SPANS_PER_BLOCK = 2


# Upper bound on calls per round (also bounded so a block's input and output sets fit in round_memory_mb).
MAX_CALLS_PER_ROUND = 1024


# Inputs and outputs one worker keeps alive for a block (k x spans_per_block sets). On CUDA at most a tenth of the
# GPU's memory (two workers share it): at 2 GB a task with 8 MB inputs and outputs got k = 10, spans of 1 ms, and
# noisy ratios. On CPU the sets live in host memory, so this is further capped to a quarter of what the host or
# container (cgroup limit) has free and of memory_limit_mb: two workers stage at once, and a 2 GB evaluator container
# whose workers staged 2 GB each was OOM-killed mid-timing.
ROUND_MEMORY_MB = 8192


# A block whose sets (spans x k x set_bytes, set_bytes with its quarter for temporaries) would take more than this share
# of the GPU's memory gets one span instead of two (version 23). Why: both workers hold their block at once, beside
# the forward's own temporaries and the captured graphs; on an 80 GB H100 the KernelBench tasks with 4-16 GiB inputs
# (two spans: 0.38-0.5 of the card per worker) ran out of memory in 24 of level 1's 100 self-pairs
# (bench/results/2026-12-06-h100-kernelbench), where the H200's 141 GB held them at 0.21-0.29. 0.3 keeps every task
# that fitted there at two spans (the H200 table's rows stand) and halves the block of those that did not. A block of
# one span is still a pair of spans of fresh inputs, staged and digested like any other; only the block count rises.
# Version 24 counts one forward's own temporaries beside the sets (measured in calibration's first call on a GPU,
# worker_memory.forward_transient): at 23, KernelBench's masked cumsum (9 GiB a set, x * mask a 4 GiB temporary) kept
# two spans at 0.284, its workers held 37 GiB each on the H100 and the self-pair scored 0.97 (harness-time-excess);
# with its temporary it is at 0.335 and one span (run at 24: 0.973 still; the excess was the candidate's staging
# copying its boolean mask into its graph buffer, mended in 25, worker_inputs.generate_columns). One span costs wall
# time (22 of the 23 one-span tasks scored within 0.4% of 1 at 23; 34_InstanceNorm 0.976 at 23, 1.012 at 24), so a
# forward with large temporaries may get one span on an H200 too.
BLOCK_MEMORY_SHARE = 0.3


# clock='held' with cuda_graphs (version 10; 0 = off): before the reference captures its graphs, raise k so the
# reference's span holds about this many ms of GPU time (its eager held time per call; within the block's memory and
# max_calls_per_round; never lowered). Otherwise k comes from the parent's clock (target_round_ms), mostly dispatch
# for a launch-bound reference: graph spans of 0.5-1.5 ms of GPU time, where a phase's fixed costs (the holder's
# drain, context switches) weigh more. On the H100 (eighth session, call 1) 10 took LayerNorm from k = 55-72 to 147
# and GELU from 90 to 310, and their drain charges (2-8% of the score) to 0.
GRAPH_SPAN_MS = 10.0


# Floor of the per-run time limit (1000x a 10 us reference is too tight).
MIN_TIMEOUT_S = 5.0


@dataclass
class Calibration:
    k: int  # forward calls per timing round
    overhead: float  # seconds: fixed cost of an empty timed span (reference round trip + device sync)
    ref_baseline: float  # seconds per call: the reference alone, before any candidate code existed
    in_bytes: int
    out_meta: list
    spans: int  # paired spans per block: spans_per_block, fewer when that many single-call sets overflow memory
    k_mem: int = 1 << 30  # the most calls per span a block's memory allows
    ref_dev_baseline: float = 0.0  # EvalConfig.clock = "device": the reference alone on the device clock, per call
    ref_queue: float = 0.0  # EvalConfig.clock = "device": the reference's host queueing time of one span (k calls)
    k_held_cap: int = 1 << 30  # EvalConfig.clock = "held": the most calls whose launches queue behind a hold
    ref_dev_baseline_eager: float = 0.0  # EvalConfig.cuda_graphs: the held baseline of eager spans, kept
    transient: int = 0  # bytes: the reference's forward temporaries beyond its outputs (a GPU; spans_for)

    @property
    def set_bytes(self) -> int:
        """Bytes of one call's inputs and outputs (what session.trim compares with TRIM_MIN_BYTES)."""
        return self.in_bytes + output_bytes(self.out_meta)


def round_memory_bytes(cfg: EvalConfig, device: str) -> int:
    """What one worker may keep alive for a timing block (see ``round_memory_mb``). On CPU the staged sets are
    host memory: at most a quarter of what the host or container has free (two workers stage at once, and the
    parent holds copies while checking) and of a worker's address-space limit."""
    budget = ROUND_MEMORY_MB * 1024 * 1024
    if device.startswith("cuda"):
        # A tenth of the GPU's memory per worker (two workers share it, beside the candidate's own allocations).
        total = device_memory_bytes(device)
        if total:
            budget = min(budget, total // 10)
    else:
        budget = min(budget, host_free_bytes() // 4)
        if cfg.memory_limit_mb:
            budget = min(budget, cfg.memory_limit_mb * 1024 * 1024 // 4)
    return max(budget, 1)


def device_memory_bytes(device: str) -> int | None:
    """The GPU's total memory (None on a CPU, or where CUDA is not available to the parent)."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    idx = int(device.split(":")[1]) if ":" in device else 0
    return int(torch.cuda.get_device_properties(idx).total_memory)


def spans_for(set_bytes: int, budget: int, device_bytes: int | None, transient: int = 0) -> int:
    """Paired spans per block: SPANS_PER_BLOCK (2), at least 2 however large the sets, but 1 when two single-call
    sets and one forward's temporaries (``transient``: one call runs at a time) would take more than
    BLOCK_MEMORY_SHARE of the GPU (see there)."""
    spans = max(2, min(SPANS_PER_BLOCK, budget // max(set_bytes, 1)))
    if device_bytes and spans * set_bytes + transient > BLOCK_MEMORY_SHARE * device_bytes:
        return 1
    return spans


def itemsize(dtype: str) -> int:
    return torch.empty(0, dtype=getattr(torch, dtype, torch.float64)).element_size()


def output_bytes(out_meta: list) -> int:
    """Bytes of one call's outputs, from their (shape, dtype) list."""
    return sum(math.prod(shape) * itemsize(dtype) for shape, dtype in out_meta)


def calibrate(s: Session) -> Calibration:
    """Clean reference baseline, before any candidate code exists: output shapes, the fixed cost of an empty
    timed span, calls per round (k) and the reference's own time per call."""
    cfg = s.cfg
    # warm-up and output shapes: one set drawn on the device, no outputs shipped
    # (and the forward's own temporaries, measured on a GPU: spans_for counts them beside the block's sets)
    _, h, _ = s.draw_run(s.ref, *s.draw_seeds(1, variants=False), timeout=s._left(cfg.max_wall_s), ship=False,
                         transient=True)
    out_meta = [(list(shape), dtype) for shape, dtype in h["out_meta"]]
    in_bytes, transient = int(h["in_bytes"]), int(h.get("transient_bytes") or 0)
    device_bytes = device_memory_bytes(s.device)
    one = output_bytes(out_meta) + in_bytes
    if device_bytes and 2 * one > device_bytes:
        # Two workers, each with at least one call's inputs and outputs alive in a block, cannot share this GPU: a
        # clear error now, before the candidate is started (and before the warm-up block below, which holds two
        # sets), instead of one out of memory minutes into timing
        raise EvaluatorError(f"out of memory (planned): one call's inputs and outputs take {one / 2**30:.1f} GiB and "
                             f"the two workers' timing blocks need at least twice that; the GPU has "
                             f"{device_bytes / 2**30:.1f} GiB")
    s.ref_block(1, 2)  # warm-up of the timing path itself (lazy library handles, allocator)
    overhead = min(s.ping() for _ in range(10))  # the smallest: subtracting less keeps ratios toward 1
    # a block keeps its input sets and every call's outputs alive (plus a quarter for the digest's temporaries)
    set_bytes = int(1.25 * one)
    budget = round_memory_bytes(cfg, s.device)
    # a block holds spans x k sets; with huge sets the block gets fewer spans before k drops below one
    spans = spans_for(set_bytes, budget, device_bytes, transient)
    k_mem = max(1, int(budget / max(set_bytes, 1) / spans))
    # Calls per span from the reference's own spans, measured the way the timed ones are; repeated until k
    # settles and the device has been busy for warmup_ms (an idle GPU runs at a fraction of its clock for the
    # first tens of ms: calibrating on that gave spans of 2 ms instead of 5 on the H100).
    # Calibration blocks have 4 spans (the first is dropped): k0 x 4 sets must fit the same budget as a timed
    # block's k x spans (4 spans of k_mem calls staged 2x the budget and got the reference OOM-killed in a 2 GB
    # container).
    k_cal = max(1, k_mem * spans // 4)
    # Sets so large that even one call per span overflows the budget (KernelBench: 7-16 GiB inputs) get 2 spans
    # (one measured): 4 held 4 sets, up to 80 GiB on the H200, more than an H100 has.
    cal_spans = 4 if 4 * k_cal * set_bytes <= max(budget, spans * k_mem * set_bytes) else 2
    k, t1, busy = 1, None, 0.0
    for it in range(5):
        k0 = min(k_cal, 8 if t1 is None else k)
        spans_t = s.ref_block(k0, cal_spans, expect_s=(t1 or 0.0) * k0)
        busy += sum(spans_t)
        t1 = max(statistics.median(spans_t[1:]) - overhead, 1e-9) / k0
        k_new = calls_per_span(cfg, k_mem, t1)
        settled = it >= 1 and abs(k_new - k) <= 0.2 * k
        k = k_new
        if settled and busy >= WARMUP_MS / 1000:
            break
    ref_baseline = max(statistics.median(s.ref_block(k, spans, expect_s=t1 * k)) - overhead, 1e-9) / k
    cal = Calibration(k, overhead, ref_baseline, in_bytes, out_meta, spans, k_mem, transient=transient)
    if uses_held_clock(s):
        # The launches of a span queue behind the hold, and CUDA's launch queue holds about a thousand: a span
        # with more makes the host wait for the GPU mid-queueing, and its later launches trail the GPU (host gaps
        # on the clock: GELU's 2,600 launches a span gave work ratios 7% apart, call 3). Halve k until the
        # reference's queueing ends within its hold.
        for _ in range(6):
            s.queue0["go"] = ref_baseline * k
            s.queue["go"]["ref"].clear()
            s.ref_block_held(k, spans)  # the queueing times that size the holds
            if not s.queue_full or k == 1:
                break
            k = cal.k = max(1, k // 2)
        cal.k_held_cap = k
        cal.ref_dev_baseline = statistics.median(s.ref_block_held(k, spans)) / k
        if cfg.cuda_graphs:
            _capture_reference(s, cal)
    if uses_device_clock(s):
        replies: list[dict] = []
        cal.ref_dev_baseline = statistics.median(
            s.ref_block(k, spans, t1 * k, device_spin(cfg, ref_baseline * k), replies)) / k
        cal.ref_queue = statistics.median(reply_seconds(r, "queued_s", ref_baseline * k) for r in replies)
    return cal


def _capture_reference(s: Session, cal: Calibration) -> None:
    """EvalConfig.cuda_graphs, in calibration (no candidate code exists yet): the reference captures its graphs
    for the timed blocks' k and spans, and its clean held baseline is taken again on replays (the interference
    check compares the paired spans with it, on the same clock). It is then timed on the better of its two clocks,
    whatever the candidate does (version 13); not capturable, eagerly, said so. Either way the candidate may still
    replay (version 21, capture_candidate), over the eager k when the reference is eager.
    GRAPH_SPAN_MS: k first grows to that much of the reference's GPU time (graph spans carry no launch
    queue, so the held clock's cap on k does not bind them); back to the eager k when either side is eager."""
    cfg, k_eager = s.cfg, cal.k
    if GRAPH_SPAN_MS > 0 and cal.ref_dev_baseline > 0:
        cal.k = max(cal.k, min(MAX_CALLS_PER_ROUND, cal.k_mem,
                               round(GRAPH_SPAN_MS / 1000 / cal.ref_dev_baseline)))
    h = s.capture(s.ref, cal.k, cal.spans, s._left(cfg.max_wall_s))
    if not h.get("graph"):
        s.graphs = {"used": False, "why": f"reference: {h.get('why', 'not captured')}"}
        cal.k = k_eager
        s.graph_k, s.graph_spans = k_eager, cal.spans  # what a candidate that can be captured replays
        return
    if cal.k != k_eager:
        s.graphs["k_eager"] = k_eager
    s.graph_k, s.graph_spans = cal.k, cal.spans
    s.replay["ref"] = True
    for kind in ("go", "stage"):  # the eager queueing times no longer size these holds
        s.queue[kind]["ref"].clear()
    cal.ref_dev_baseline_eager = cal.ref_dev_baseline
    cal.ref_dev_baseline = statistics.median(s.ref_block_held(cal.k, cal.spans)) / cal.k
    s.graphs.update({"used": False, "ref_capture_s": round(float(h.get("capture_s") or 0.0), 4),
                     "ref_eager_ms": round(cal.ref_dev_baseline_eager * 1e3, 6),
                     "ref_graph_ms": round(cal.ref_dev_baseline * 1e3, 6)})
    if cal.ref_dev_baseline > cal.ref_dev_baseline_eager:
        # Version 13: the reference is timed on the better of its two clocks, whatever the candidate does. Its
        # replays were slower than its eager calls (graph memory traffic, a replay's fixed cost on a GPU-bound
        # model): it stays eager, and a candidate is never paid for the reference's worse clock.
        _reference_eager(s, cal, k_eager, "reference: eager calls faster than graph replay")
        s.graph_k = k_eager  # the candidate's graphs, if it replays, hold the eager spans' calls


def capture_candidate(s: Session, cal: Calibration) -> None:
    """EvalConfig.cuda_graphs, after the candidate's correctness trials: each side is timed on the better of its
    own two clocks, eager calls or graph replay, whatever the other side does. The reference chose in calibration
    (``_capture_reference``); here the candidate captures its graphs over the same k and spans, and one held block
    of each of its clocks chooses (version 21). Before it, a candidate replayed only when the reference did, and
    the reference went eager whenever its replays were slower, even by noise: where its two clocks were a tie the
    candidate's clock followed a coin (H100, the MinReduction seed: 2.26 eager in 3 of 11 evaluations, else 2.66
    replayed; the triangular-matmul seed 0.04 and 0.67). A minimum of two clocks has no such step. The choice is the
    candidate's own: it could always refuse capture and be timed eagerly, and either clock's timed blocks are
    checked as ever. The reference's clock does not depend on the candidate (version 13): when the candidate
    cannot be captured or its eager calls are faster, it is timed eagerly and a replaying reference keeps
    replaying, re-captured for the eager k (``timing.graphs.ref_only``); both are eager only when neither replays
    faster or the re-capture fails (``timing.graphs.why``). Issue 32: an honest LSTM wrapped in its own graph
    scored 2.6-3.3x against an eager reference, 1.0x against a replayed one."""
    if not s.graph_k:
        return
    k_e = cal.k_held_cap  # the calls an eager span's launch queue allows (calibration's k, before graph_span_ms)
    eager = statistics.median(s.block_held(s.cand, k_e, cal.spans)) / k_e
    s.trim(cal.set_bytes, s.cand)  # that block's sets, before the graphs' own
    # recording costs about what running does on the host, plus two eager warm-up calls
    h = s.capture(s.cand, s.graph_k, s.graph_spans, run_timeout(s, cal, s.graph_k * s.graph_spans + 2))
    if h.get("graph"):
        s.replay["cand"] = True
        s.graphs["cand_capture_s"] = round(float(h.get("capture_s") or 0.0), 4)
        replay = statistics.median(s.block_held(s.cand, s.graph_k, s.graph_spans)) / s.graph_k
        s.graphs.update(cand_eager_ms=round(eager * 1e3, 6), cand_graph_ms=round(replay * 1e3, 6))
        for kind in ("go", "stage"):  # the eager block's queueing times do not size the replays' holds
            s.queue[kind]["cand"].clear()
        if replay <= eager:
            s.graphs.update(used=s.replay["ref"], cand_replays=True)
            return
        s.replay["cand"] = False
        s.trim(cal.set_bytes, s.cand, graphs=True)
        why = "candidate: eager calls faster than graph replay"
    else:
        why = f"candidate: {str(h.get('why', 'not captured'))[:300]}"
        s.queue["go"]["cand"].clear()  # sized again by the timed blocks' eager spans
    if not s.replay["ref"]:  # the reference is eager too (its own choice, or it could not be captured): said why
        s.graphs.update(used=False, why=f"{s.graphs['why']}; {why}")
        return
    if _reference_replays_alone(s, cal):
        s.graphs.update(used=False, ref_only=True, why=why)
        return
    # eager spans: the k the launch queue allows (graph_span_ms raised it)
    _reference_eager(s, cal, min(cal.k, cal.k_held_cap), why + "; the reference's re-capture failed too: both eager")


def _reference_eager(s: Session, cal: Calibration, k: int, why: str) -> None:
    """The reference eager: its eager baseline and ``k`` calls a span; its replay queueing times no longer size the
    holds, and its graphs (a block's sets and outputs) are dropped."""
    s.replay["ref"] = False
    # its graphs (a block's sets and outputs) are not replayed again: large ones give their memory back
    s.trim(cal.set_bytes, s.ref, graphs=True)
    cal.ref_dev_baseline = cal.ref_dev_baseline_eager
    cal.k = k
    s.graphs.pop("k_eager", None)
    s.queue["go"]["ref"].clear()
    s.queue["stage"]["ref"].clear()
    s.graphs.update(used=False, why=why)


def _reference_replays_alone(s: Session, cal: Calibration) -> bool:
    """The candidate stays eager: its spans must hold no more calls than the launch queue allows behind a hold
    (k_held_cap; graph_span_ms raised k for replays only), so the reference captures again for that k when it
    differs, and its clean replay baseline is taken again at that k (fewer calls per graph launch: the
    interference check must compare like with like). False when the re-capture fails: the caller times both
    sides eagerly."""
    k_eager = min(cal.k, cal.k_held_cap)
    if k_eager != s.graph_k:
        h = s.capture(s.ref, k_eager, s.graph_spans, s._left(s.cfg.max_wall_s))
        if not h.get("graph"):
            return False
        s.graph_k = cal.k = k_eager
        s.queue["go"]["ref"].clear()
        s.queue["stage"]["ref"].clear()
        cal.ref_dev_baseline = statistics.median(s.ref_block_held(cal.k, cal.spans)) / cal.k
        s.graphs.update(ref_recapture_s=round(float(h.get("capture_s") or 0.0), 4),
                        ref_graph_ms_eager_k=round(cal.ref_dev_baseline * 1e3, 6))
    s.graphs.pop("k_eager", None)
    return True


def uses_held_clock(s: Session) -> bool:
    """EvalConfig.clock = "held" applies on CUDA (kernelrl/evaluation/held.py); elsewhere the parent's clock."""
    return held_clock(s.cfg, s.device)


def uses_device_clock(s: Session) -> bool:
    """EvalConfig.clock = "device" applies on CUDA; elsewhere the parent's clock (a CPU has no clock of its own
    that the candidate's process could not reach, and on a loaded 2-core VM the reference's round trips were too
    noisy for the check against the parent's clock to bound a patched timer)."""
    return s.cfg.clock == "device" and s.device.startswith("cuda")


def device_spin(cfg: EvalConfig, queued_s: float) -> float:
    """The spin kernel's length before a device-clock span: device_spin_factor x the host's queueing time of the
    span's calls (+0.2 ms). With 1.5x, spans where the host had not queued every call when the spin ended made two
    pairs 35% and 76% apart on the H100; with 3x, 18 of 20 pairs were within 2% (bench/timer_modes.py, git history)."""
    return DEVICE_SPIN_FACTOR * queued_s + 2e-4


def calls_per_span(cfg: EvalConfig, k_mem: int, per_call_s: float) -> int:
    """k: calls so that the reference's span takes about target_round_ms, within the block's memory."""
    return max(1, min(MAX_CALLS_PER_ROUND, k_mem, round(TARGET_ROUND_MS / 1000 / per_call_s)))


def run_timeout(s: Session, cal: Calibration, n: int) -> float:
    return s._left(max(MIN_TIMEOUT_S, s.cfg.timeout_factor * cal.ref_baseline * n))
