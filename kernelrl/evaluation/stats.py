"""Timing statistics.

The score is estimated from *paired spans*: the reference and the candidate each run the same k fresh input sets
in adjacent spans, and the parent's clock gives each side's time. Pairs come in blocks (the inputs of a block
are staged together); the blocks are the independent unit (spans of one block share the machine's state, which
moves between blocks), one ratio per block (the geometric mean of its pairs). The estimate is the Hodges-Lehmann
estimate of the blocks' log-ratios with the interval that inverts Wilcoxon's signed-rank test (nearly the mean's
efficiency, robust to 29% wild blocks; the median's order-statistic interval, robust to 50%, needed ~1.5x the
blocks for the same width and was dropped with EvalConfig.estimator in issue 34). The reported score is the interval's
*lower* bound rounded toward 1: what the measurement supports, never more.

The paper's statistic (7 contiguous buckets of rounds, median of the bucket means, spread of the means) is kept
as a diagnostic (``bucket_stats``): bucket means of ratios are fragile to single outlier rounds, and the paper's
"discard when the spread is large" throws the measurement away instead of reporting what is known.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kernelrl.evaluation.flags import FATAL


def round_toward_one(x: float, digits: int = 2) -> float:
    """Round to ``digits`` decimals toward 1 (the paper: 1.118 -> 1.11, 0.992 -> 1.00, 0.876 -> 0.88)."""
    if not math.isfinite(x) or x <= 0:
        return 0.0
    q = 10**digits
    if x >= 1:
        return math.floor(x * q + 1e-9) / q
    return math.ceil(x * q - 1e-9) / q


@dataclass
class BucketStats:
    rounds: int
    bucket_means: list[float]
    spread: float  # (max - min) / median of the bucket means
    score: float  # median of the bucket means (unrounded)

    def to_dict(self) -> dict:
        return {"rounds": self.rounds, "bucket_means": [round(b, 5) for b in self.bucket_means],
                "bucket_spread": round(self.spread, 5)}


def bucket_stats(ratios: list[float], buckets: int = 7) -> BucketStats:
    """Split per-round ratios (in round order) into ``buckets`` contiguous buckets; score = median bucket mean."""
    if not ratios:
        return BucketStats(0, [], float("inf"), 0.0)
    n = min(buckets, len(ratios))
    size = len(ratios) / n
    means = []
    for i in range(n):
        chunk = ratios[int(round(i * size)): int(round((i + 1) * size))]
        means.append(sum(chunk) / len(chunk))
    med = statistics.median(means)
    spread = (max(means) - min(means)) / med if med > 0 else float("inf")
    return BucketStats(len(ratios), means, spread, med)


def median_ci(xs: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """(median, low, high): the sample median and a distribution-free ~95% interval for the population median
    from order statistics (ranks n/2 -+ z*sqrt(n)/2, the normal approximation to the binomial). With fewer than
    about 6 samples the interval is the whole range."""
    if not xs:
        return 0.0, 0.0, 0.0
    s = sorted(xs)
    n = len(s)
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return statistics.median(s), s[lo], s[max(hi, lo)]


def hodges_lehmann_ci(xs: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """(estimate, low, high) for the centre of positive ratios: the Hodges-Lehmann estimator of their logs (the
    median of all n(n+1)/2 pairwise means, Walsh averages) with the distribution-free ~95% interval that
    inverts Wilcoxon's signed-rank test (ranks C and N-1-C of the sorted Walsh averages, C from the normal
    approximation). Assumes only a symmetric spread of the log-ratios around their centre. Against the plain
    median it keeps most of the mean's efficiency (95% for normal noise, 64% for the median: the same interval
    from about two thirds of the pairs) and still ignores up to 29% of wild pairs."""
    if not xs:
        return 0.0, 0.0, 0.0
    pos = [x for x in xs if x > 0 and math.isfinite(x)]
    if len(pos) < len(xs):  # a zero or infinite ratio has no log: fall back to the order statistics
        return median_ci(xs, z)
    import torch

    lg = torch.tensor(pos, dtype=torch.float64).log()
    n = lg.numel()
    i, j = torch.triu_indices(n, n)
    walsh = ((lg[i] + lg[j]) / 2).sort().values
    big_n = walsh.numel()
    c = int(math.floor(n * (n + 1) / 4 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24)))
    c = max(0, min(c, (big_n - 1) // 2))
    est = float(walsh.median()) if big_n % 2 else float(walsh[big_n // 2 - 1: big_n // 2 + 1].mean())
    return math.exp(est), math.exp(float(walsh[c])), math.exp(float(walsh[big_n - 1 - c]))


def block_ratios(ratios: list[float], block_of: list[int]) -> list[float]:
    """One ratio per block: the geometric mean of its pairs' ratios (the unit the statistics treat as
    independent). A non-positive or infinite ratio keeps its block's value at that extreme."""
    groups: dict[int, list[float]] = {}
    for r, b in zip(ratios, block_of):
        groups.setdefault(b, []).append(r)
    out = []
    for b in sorted(groups):
        rs = groups[b]
        if all(0 < r < float("inf") for r in rs):
            out.append(math.exp(sum(math.log(r) for r in rs) / len(rs)))
        else:
            out.append(min(rs) if any(r <= 0 for r in rs) else float("inf"))
    return out


@dataclass
class PairedStats:
    """The timing verdict of one evaluation (all times in seconds per call)."""

    rounds: int
    estimate: float  # median of per-round ratios
    ci_low: float
    ci_high: float
    ref_per_call: float  # median over rounds
    cand_per_call: float  # median over rounds, the harness-time charge included
    charge_per_call: float  # mean harness time charged to the candidate's spans (work moved out of them)
    excess_per_call: float  # median over blocks of the candidate's harness time minus the reference's (signed)
    excess_se_per_call: float  # the tolerance below which a block's excess is not charged
    median_ratio: float = 0.0  # diagnostic: the plain median of the per-pair ratios
    cand_span_per_call: float = 0.0  # median over blocks of the candidate's own span (no charge, overhead off)
    noise_per_call: float = 0.0  # 3 standard errors of the median harness excess (honest noise), per call
    dropped_blocks: int = 0  # paired_totals: blocks left out of the totals (the tenth with the largest excess)
    # CPU evaluations: the candidate's harness excess in the workers' own CPU time (kernel clock; median over
    # blocks) and its noise, both per call; None where not measured (GPU: work queued on the device costs no CPU)
    cpu_excess_per_call: float | None = None
    cpu_noise_per_call: float = 0.0

    @property
    def work_moved_out(self) -> bool:
        """The candidate's harness excess (median over blocks) is larger than its own timed span, beyond the
        noise of that median (noise_per_call) and at least a tenth of the reference's time per call: more of
        its work runs outside the clock than inside, and enough of it to matter against the reference. Honest
        candidates measured 0.31 of their span at most (180 evaluations, CPU VM and H100); a patched harness that
        computes while its inputs are staged, or defers the work to the digest, 10-100x its span. The floors
        keep a loaded machine's harness noise off honest fast candidates: on CI's loaded 2-core runner an
        honest 20x candidate (07_Conv2d_GlobalAvgPool/pooled_taps, 1.2 ms spans against a 26-54 ms reference)
        read a median excess above its span, the harness being 6-9 ms per call there with blocks +-5 ms apart
        and biased to one side. Where the noise hides the move, the per-block charge still holds it.

        On a CPU the workers' own CPU time in the harness (``cpu_excess_per_call``) must say so too. A loaded
        machine's wall clock there is mostly waiting to be scheduled: two evaluations at once on CI's 2 cores
        (the soak) put the harness at 3-5 ms of wall time per call for ~1 ms of CPU time, with one side slower by
        ~1 ms per call across a whole evaluation (the median over blocks, 8 of them, did not average it out;
        07_PairwiseSqDistance/gemm_expansion, an honest 12x with 0.2 ms spans, scored 0 on CI), while the CPU
        time's excess stayed within +-0.1 ms per block. Work moved into the harness runs in the worker (or in
        the processes it had when frozen): its CPU time grows by as much as its wall time (the red team's
        patched harnesses: equal within 10%). A helper that starts and ends between two freezes escapes this
        flag, never the wall-clock charge above."""
        floor = max(self.cand_span_per_call, self.noise_per_call, 0.1 * self.ref_per_call)
        if not self.excess_per_call > floor > 0:
            return False
        if self.cpu_excess_per_call is None:
            return True
        cpu_floor = max(self.cand_span_per_call, self.cpu_noise_per_call, 0.1 * self.ref_per_call)
        return self.cpu_excess_per_call > cpu_floor

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width relative to the estimate."""
        return (self.ci_high - self.ci_low) / (2 * self.estimate) if self.estimate > 0 else float("inf")

    @property
    def score(self) -> float:
        """The conservative claim: the interval's lower bound (unrounded)."""
        return self.ci_low

    def to_dict(self) -> dict:
        return {"rounds": self.rounds, "estimate": round(self.estimate, 5), "ci_low": round(self.ci_low, 5),
                "ci_high": round(self.ci_high, 5), "ci_rel_halfwidth": round(self.rel_halfwidth, 5),
                "score_raw": round(self.score, 5),
                "ref_median_ms": round(self.ref_per_call * 1e3, 6),
                "cand_median_ms": round(self.cand_per_call * 1e3, 6),
                "harness_charge_ms": round(self.charge_per_call * 1e3, 6),
                "harness_excess_ms": round(self.excess_per_call * 1e3, 6),
                "harness_tolerance_ms": round(self.excess_se_per_call * 1e3, 6),
                "cand_span_ms": round(self.cand_span_per_call * 1e3, 6), "dropped_blocks": self.dropped_blocks,
                "median_ratio": round(self.median_ratio, 5),
                **({"harness_cpu_excess_ms": round(self.cpu_excess_per_call * 1e3, 6),
                    "harness_cpu_noise_ms": round(self.cpu_noise_per_call * 1e3, 6)}
                   if self.cpu_excess_per_call is not None else {})}


def _paired(ref_go, cand_go, ref_harness, cand_harness, block_of):
    """(pairs, blocks with harness times, block of each pair, the candidate's harness excess per block)."""
    n = min(len(ref_go), len(cand_go))
    nh = min(len(ref_harness), len(cand_harness))
    block_of = list(block_of) if block_of is not None else list(range(n))
    return n, nh, block_of, [cand_harness[b] - ref_harness[b] for b in range(nh)]


def _median_excess_noise(ref_harness: list[float], excess: list[float]) -> float:
    """The noise of the *median* harness excess over n blocks (work_moved_out): 3 standard errors of a median of
    such differences (1.2533 sigma / sqrt(n)), sigma the larger of the reference's own (a difference of two
    harness times: sqrt(2) x its robust sd) and the excesses' spread (under load the two sides' harness times
    wander apart by more than the reference's MAD says; a candidate that widens it only loses the flag, never
    the charge), and at least 2% of the reference's median harness time."""
    sigma = max(math.sqrt(2) * robust_sd(ref_harness), robust_sd(excess))
    return max(3 * 1.2533 * sigma / math.sqrt(len(excess)), 0.02 * statistics.median(ref_harness))


def paired_stats(ref_go: list[float], cand_go: list[float], ref_harness: list[float], cand_harness: list[float],
                 k: int, overhead: float = 0.0, block_of: list[int] | None = None,
                 span_cap: float = 0.2, ref_harness_cpu: list[float] | None = None,
                 cand_harness_cpu: list[float] | None = None) -> PairedStats:
    """Parent-clock times of the timed spans (``*_go``, paired: the same k inputs' forward calls and a
    device-wide sync on each side) and of the harness phases around them (``*_harness``: staging the inputs
    before the clock and digesting the outputs after it, one value per block, already divided by the spans in a
    block: seconds per span). ``block_of[i]``: the block of pair i (default: pair i is block i).

    ``overhead`` (seconds per span) is the fixed cost of one empty timed span measured on the trusted reference
    worker (the round trip and the sync): it is subtracted from both sides, never more than 90% of either.

    Harness excess, block by block: the candidate's staging + digest time minus the reference's for the same
    inputs. The harness code is the same on both sides, so an honest candidate's excess is noise around 0 (or a
    constant, e.g. outputs that are slower to digest); work moved out of the timed spans (computed while its
    inputs were staged, deferred until its outputs are digested) shows up here. Every block's excess beyond a
    tolerance is charged to that block's candidate spans: moving work gains at most the tolerance, in any share
    of the blocks. The tolerance is 3 standard deviations of a difference of two harness times, taken from the
    *reference's* own harness noise (MAD over blocks; the candidate cannot widen it), and at least 2% of the
    reference's harness time, but never more than ``span_cap`` of the candidate's median span in that block (so
    moving work out of the spans gains at most 1 + span_cap, whatever the noise: 1.2x at 0.2). An honest
    block that is slow by accident is charged alone, and moves the median of the ratios by one rank at most.

    The estimate and its interval are taken over *blocks* (``block_ratios``): on the H100 the spans of one block
    agreed within ~2% while the level moved by up to 20% from block to block (the GPU's clock, the staged
    memory), so pairs of one block are not independent, and an interval over pairs was too narrow (a Softmax
    repeat claimed 14% over its 10x longer run).

    ``*_harness_cpu`` (CPU evaluations): the same harness phases in the workers' CPU time, per block and span;
    each block is charged the larger of the two clocks' excess (_cpu_charges), and work_moved_out needs the CPU
    time's excess too (see there)."""
    n, nh, block_of, excess = _paired(ref_go, cand_go, ref_harness, cand_harness, block_of)
    if n == 0:
        return PairedStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    if nh:
        tol = _block_tolerance(ref_harness[:nh])
        median_noise = _median_excess_noise(ref_harness[:nh], excess)
    else:
        tol = median_noise = 0.0
    cpu_ex = cpu_noise = cpu_excess = None
    if ref_harness_cpu is not None and cand_harness_cpu is not None:
        cpu_excess = [c - r for r, c in zip(ref_harness_cpu, cand_harness_cpu)]
        if cpu_excess:
            cpu_ex = statistics.median(cpu_excess) / k
            cpu_noise = _median_excess_noise(ref_harness_cpu[:len(cpu_excess)], cpu_excess) / k
    # The forgiven share is also capped at ``span_cap`` of the candidate's own span time in that block (1/3 before
    # HARNESS_ALLOWANCE): work moved into the harness then gains at most 1 + span_cap over doing it in
    # the span (moving span_cap / (1 + span_cap) of it, all forgiven), however noisy the machine (a loaded 2-core
    # runner widened the noise tolerance past the whole deferred softmax: 18x for 2.8x honest).
    cand_span: dict[int, list[float]] = {}
    for i in range(n):
        cand_span.setdefault(block_of[i], []).append(cand_go[i] - min(overhead, 0.9 * cand_go[i]))
    tols = [min(tol, statistics.median(cand_span[b]) * span_cap) if b in cand_span else tol for b in range(nh)]
    charges = [max(0.0, e - t) for e, t in zip(excess, tols)]
    if cpu_excess is not None:
        charges = _cpu_charges(charges, ref_harness[:nh], ref_harness_cpu, cpu_excess, cand_span, span_cap)
    ratios, r_calls, c_calls, charged = [], [], [], []
    for i in range(n):
        b = block_of[i]
        charge = charges[b] if 0 <= b < nh else 0.0
        r = ref_go[i] - min(overhead, 0.9 * ref_go[i])
        c = cand_go[i] + charge
        c -= min(overhead, 0.9 * c)
        ratios.append(r / c if c > 0 else float("inf"))
        r_calls.append(r / k)
        c_calls.append(c / k)
        charged.append(charge)
    est, lo, hi = hodges_lehmann_ci(block_ratios(ratios, block_of))
    exc = statistics.median(excess) if excess else 0.0
    span = statistics.median(statistics.median(v) for v in cand_span.values())
    return PairedStats(n, est, lo, hi, statistics.median(r_calls), statistics.median(c_calls),
                       statistics.mean(charged) / k, exc / k, (statistics.median(tols) if tols else tol) / k,
                       statistics.median(ratios), span / k, median_noise / k,
                       cpu_excess_per_call=cpu_ex, cpu_noise_per_call=cpu_noise or 0.0)


def _block_tolerance(ref: list[float]) -> float:
    """The harness excess a block may show without a charge: 3 standard deviations of a difference of two of the
    *reference's* harness times (MAD over blocks: the candidate cannot widen it), at least 2% of their median."""
    return max(3 * math.sqrt(2) * robust_sd(ref), 0.02 * statistics.median(ref))


def _cpu_charges(charges: list[float], ref_harness: list[float], ref_cpu: list[float], cpu_excess: list[float],
                 cand_span: dict[int, list[float]], span_cap: float) -> list[float]:
    """A CPU evaluation's per-block charges: the larger of the wall-clock charge and the candidate's harness
    excess in the workers' own CPU time (``cpu_excess``; kernel clock, which nothing in the worker can shrink),
    that CPU time priced at what a CPU second cost in wall time in the same block (the *reference's* harness wall
    / CPU time, 1-10), beyond the wall clock's kind of tolerance (_block_tolerance of the reference's CPU harness
    times, at most ``span_cap`` of the candidate's span).

    Why (evaluator version 26): on a loaded machine the wall-clock excess is mostly waiting to be scheduled, on
    either side: with the 2 cores of this VM busy, the red team's precompute_while_staging (its softmax computed
    while the harness staged its inputs) read a *negative* wall excess in 5 of 6 evaluations and scored 3-43x
    against an honest ~4x, while its CPU-time excess held at 0.8-2.7 ms per call; honest candidates' CPU-time
    excess stays within +-0.1 ms a block there (PairedStats.work_moved_out)."""
    nb = min(len(charges), len(cpu_excess), len(ref_harness))
    if nb == 0:
        return charges
    tol = _block_tolerance(ref_cpu[:nb])
    out = list(charges)
    for b in range(nb):
        price = min(10.0, max(1.0, ref_harness[b] / ref_cpu[b])) if ref_cpu[b] > 0 else 1.0
        t = min(tol * price, statistics.median(cand_span[b]) * span_cap) if b in cand_span else tol * price
        out[b] = max(out[b], cpu_excess[b] * price - t)
    return out


def _t_quantile(df: int, z: float = 1.96) -> float:
    """Student's t quantile matching the normal's ``z`` (Cornish-Fisher, within 1% from 3 degrees of freedom)."""
    df = max(df, 1)
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def robust_sd(xs: list[float]) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that a few wild values do not move."""
    if len(xs) < 2:
        return 0.0
    med = statistics.median(xs)
    return 1.4826 * statistics.median(abs(x - med) for x in xs)


def _without_wild(ratios: list[float], rel: float = 0.02) -> list[float]:
    """The held clock's block ratios less the wild ones: farther from their median than 5 robust standard deviations
    and ``rel`` of it. Honest blocks agree within ~0.5% there, and one span 20x long (a host hiccup) in 8 blocks put
    n Walsh averages at the low end, which the Wilcoxon interval of so few blocks cannot skip (its lower bound fell
    from 4.5 to 1.4). Leaving out high ones too keeps it symmetric: a candidate gains nothing by slow blocks, and
    blocks that are fast by a cheat are left out."""
    if len(ratios) < 4:
        return ratios
    med, sd = statistics.median(ratios), robust_sd(ratios)
    kept = [x for x in ratios if abs(x - med) <= max(5 * sd, rel * med)]
    return kept if len(kept) >= 2 else ratios


def _wild_blocks(excess: list[float], order: list[int], sigma: float) -> set[int]:
    """The held clock (version 9): blocks whose harness excess is wild against the evaluation's own (beyond its
    median by 5 robust sd and 3 sigma of the reference's harness noise), at most a third of them, with 6 blocks or
    more; paired_totals leaves them out of both totals. On the H100 (seventh session, 31 tasks) honest candidates'
    excess sat within +-0.03 ms a block but for a rare block of 0.8-7.7 ms (a host gap in one phase), two in some
    evaluations: one stayed in and was charged to every span (DiagMatmul 8.03 against 8.75, Gemm_Softmax_Argmax 1.08
    against 1.36). Work moved out in a few blocks still buys nothing: their spans do not count either."""
    nh = len(excess)
    if nh < 6:
        return set()
    thr = statistics.median(excess) + max(5 * robust_sd(excess), 3 * sigma)
    return set([b for b in reversed(order) if excess[b] > thr][:nh // 3])


def paired_totals(ref_go: list[float], cand_go: list[float], ref_harness: list[float], cand_harness: list[float],
                  k: int, block_of: list[int] | None = None, robust: bool = False,
                  allowance: float = 0.0, wild_drop: bool = True) -> PairedStats:
    """The device clock's statistics (EvalConfig.clock = "device", evaluator version 6): the ratio of the
    reference's total device time to the candidate's over the counted blocks, with a ~95% interval from the
    blocks' spread (delta method, Student's t over blocks), and the harness excess charged on the *totals*.

    Why not paired_stats' per-block charge: a device-clock span is the GPU's own time, often a few ms or less,
    while the harness phases (staging, digest) stay parent-timed host work of ~5-10 ms per span whose noise
    on the H100 VM was +-1 ms per block. A per-block tolerance capped at a fifth of that span charged honest
    noise: Softmax's three repeats 31% apart, 2.2% without the charge (bench/results/2026-11-25-h100-evaluator-v5).

    Here the g = max(1, n/10) blocks with the largest harness excess are left out of both totals (work moved
    out in a few blocks buys nothing: those blocks do not count; an honest outlier costs one block) and, for an
    unbiased mean, the g with the smallest excess are left out of the mean (not of the totals). The trimmed mean
    excess beyond 2 standard errors is charged to every span counted: work moved out in every block, or in some,
    is charged but for 2 standard errors, from the *reference's* harness noise (the candidate cannot widen it;
    the bound shrinks with the blocks). Dropping blocks by a threshold instead was gamed by truncation: a cheat
    whose moves straddle the threshold loses its high blocks and is charged the truncated mean of the rest.
    On totals, work moved between spans or blocks changes nothing. ``work_moved_out`` (fatal) still compares
    the median excess of all blocks with the candidate's span.

    ``robust`` (the held clock): the estimate and interval are the Hodges-Lehmann centre of the kept blocks'
    ratios (R_b / C_b, charge included) with its Wilcoxon interval instead of the ratio of totals, wild blocks
    left out first (``_without_wild``): the held clock's spans repeat within ~0.1%, but now and then one span ran
    long (H100, call 5: one block in nine made the delta-method interval of Gemm_Divide_Sum_Scale 3x wide, its
    lower bound 1.6 against 4.6)."""
    n, nh, block_of, excess = _paired(ref_go, cand_go, ref_harness, cand_harness, block_of)
    if n == 0:
        return PairedStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    ref_med = statistics.median(ref_harness[:nh]) if nh else 0.0
    sigma = math.sqrt(2) * robust_sd(ref_harness[:nh])
    sigma = max(sigma, 0.01 * ref_med)
    order = sorted(range(nh), key=lambda b: excess[b])
    g = max(1, nh // 10) if nh >= 3 else 0
    dropped = set(order[nh - g:]) | (_wild_blocks(excess, order, sigma) if robust and wild_drop else set())
    mean_blocks = [b for b in order[g:] if b not in dropped]
    sums: dict[int, list[float]] = {}
    for i in range(n):
        b = block_of[i]
        if b in dropped:
            continue
        acc = sums.setdefault(b, [0.0, 0.0, 0])
        acc[0] += ref_go[i]
        acc[1] += cand_go[i]
        acc[2] += 1
    kept = sorted(sums)
    kept_ex = [excess[b] for b in mean_blocks] or excess
    se = sigma / math.sqrt(max(len(kept_ex), 1))
    span = statistics.median(cand_go[:n])
    # ``allowance`` (the held clock: held.SPAN_BIAS_SHARE): a share of the candidate's median span forgiven besides
    # the 2 standard errors, for per-process biases of the harness's GPU time that no number of blocks averages away
    charge = max(0.0, statistics.fmean(kept_ex) - max(2 * se, allowance * span)) if kept_ex else 0.0
    ex_all = statistics.median(excess) if excess else 0.0
    noise = 3 * 1.2533 * sigma / math.sqrt(max(nh, 1))
    R = [sums[b][0] for b in kept]
    C = [sums[b][1] + sums[b][2] * charge for b in kept]
    est = sum(R) / sum(C) if C and sum(C) > 0 else 0.0
    m = len(kept)
    if robust and m >= 2 and all(c > 0 for c in C):
        est, lo, hi = hodges_lehmann_ci(_without_wild([r / c for r, c in zip(R, C)]))
        half = None
    elif m >= 2 and est > 0:
        mc = statistics.fmean(C)
        z = [(r - est * c) / mc for r, c in zip(R, C)]
        half = _t_quantile(m - 1) * statistics.stdev(z) / math.sqrt(m)
    else:
        half = est
    if half is not None:
        lo, hi = max(est - half, 0.0), est + half
    ratios = [r / c for r, c in zip(ref_go[:n], cand_go[:n]) if c > 0]
    return PairedStats(n, est, lo, hi, statistics.median(ref_go[:n]) / k,
                       statistics.median(c + charge for c in cand_go[:n]) / k, charge / k, ex_all / k,
                       2 * se / k, statistics.median(ratios) if ratios else 0.0, span / k, noise / k,
                       dropped_blocks=len(dropped))


# -- re-verification: one rule for the in-process evaluator and the job workers ---------------------------------
def needs_reverify(speedup: float, *, reverify: bool, above: float) -> bool:
    """A successful speedup above ``above`` (EvalConfig.reverify_above) is measured again before it counts."""
    return bool(reverify) and speedup > above


def reverify_agrees(first: float, second: float, second_ok: bool, tolerance: float) -> bool:
    """The tolerance rule alone (``reverify_verdict`` without intervals): the re-measurement succeeded and is not
    below the first by more than ``tolerance`` (a fraction of the first)."""
    return reverify_verdict(first, second, second_ok, tolerance).agree


@dataclass(frozen=True)
class ReverifyVerdict:
    """What a re-measurement decided: ``agree``; ``kept``, the score that stands (the lower of the two, rounded
    toward 1; 0.0 when the re-measurement failed); ``rule``, which rule accepted it (``tolerance``,
    ``intervals-overlap``, ``reference-moved``) or why it did not (``failed``, ``mismatch``); ``why``, one readable
    sentence with both numbers and which one was kept."""

    agree: bool
    kept: float
    rule: str
    why: str

    @property
    def flag(self) -> str | None:
        """The result's flag: ``reverify-mismatch`` (fatal) when the re-measurement failed, ``reverify-disagreed``
        (information: the lower was kept) when it succeeded and disagreed, None when they agree."""
        return None if self.agree else "reverify-mismatch" if self.rule == "failed" else "reverify-disagreed"

    def to_dict(self) -> dict:
        return {"agree": self.agree, "kept": self.kept, "rule": self.rule, "why": self.why}


def _fmt_interval(iv) -> str:
    """`` [low, high]`` to three significant digits, rounded outward: the score shown beside it is its low end
    rounded toward one (3.0181 -> 3.01), which a nearest rounding of the interval (3.02) would put outside it."""
    return f" [{_outward(iv[0], up=False):.3g}, {_outward(iv[1], up=True):.3g}]" if iv else ""


def _score(x: float) -> str:
    """A score as it is stored (two decimals, no trailing zeros): 10.86 reads 10.86, not 10.9."""
    return f"{round(x, 2):g}"


def _outward(x: float, up: bool) -> float:
    """``x`` to three significant digits, rounded up or down (decimal arithmetic: 3.8 stays 3.8)."""
    from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

    if not math.isfinite(x) or x == 0:
        return x
    d = Decimal(repr(float(x)))
    return float(d.quantize(Decimal(1).scaleb(d.adjusted() - 2), rounding=ROUND_CEILING if up else ROUND_FLOOR))


def reverify_verdict(first: float, second: float, second_ok: bool, tolerance: float, *,
                     first_interval: tuple[float, float] | None = None,
                     second_interval: tuple[float, float] | None = None,
                     ref_ms: tuple[float | None, float | None] = (None, None),
                     failed_because: str = "") -> ReverifyVerdict:
    """Does the re-measurement (fresh processes, another GPU where there is one) confirm the first score?

    The lower of the two is kept, rounded toward 1, whether they agree or not; a re-measurement that failed scores 0
    (reverify-mismatch, fatal). One that succeeded and disagrees is flagged reverify-disagreed (information). It
    agrees when any of these holds:

    - ``tolerance``: it is not below the first by more than ``tolerance`` (a fraction of the first). One-sided
      (the paper accepts within 10% either way): a second measurement *above* the first cannot inflate what is
      kept, and a first measurement that was faked or lucky shows as a drop. On the CPU VM an honest 12x
      (07_PairwiseSqDistance/gemm_expansion) scored 0 in 3 of 5 evaluations under the two-sided rule.
    - ``intervals-overlap``: the two measurements' own 95% intervals overlap (the second's upper bound reaches
      the first's lower bound): the drop is within what each measurement says about its own precision.
    - ``reference-moved``: the reference itself ran faster in the second measurement (its median time per call,
      ``ref_ms``), and the drop is within the tolerance once that is allowed for: the machine's run-to-run
      variation, not the candidate's.

    Issue 32: an honest ``torch.softmax`` rewrite on the CPU VM scored 3.43, 2.83, 0.00, 3.14, 0.00, 3.46, 3.41
    over 7 evaluations, both zeros a re-measurement of ~3.0 against a first ~3.8. None of the three rules can
    raise a score: what is kept is never above the second measurement, made in fresh processes, so a candidate
    that fakes or caches only its first measurement gains nothing from them.

    Version 20: a disagreeing re-measurement keeps the lower instead of 0. Why: a candidate whose speed is drawn per
    build scored 0 or its lower speed by the order of two draws (KernelBench L1 40_LayerNorm under torch.compile on
    the H200: 25.66 then 18.33, zeroed; 15.62 then 25.45, kept 15.62): the verdict followed which build came
    first. Keeping the lower is the same whatever the order, and what is kept still never exceeds the fresh
    measurement, so a faked or lucky first measurement gains nothing; the flag still says the two disagreed.

    ``failed_because``: why the re-measurement did not succeed (its fatal flags, its error), said in ``why``."""
    def done(agree: bool, rule: str, why: str) -> ReverifyVerdict:
        return ReverifyVerdict(agree, 0.0 if rule == "failed" else round_toward_one(min(first, second)), rule, why)

    both = (f"first {_score(first)}x{_fmt_interval(first_interval)}, re-measured "
            f"{_score(second)}x{_fmt_interval(second_interval)}")
    if not second_ok or first <= 0:
        because = f" ({failed_because})" if failed_because and not second_ok else ""
        return done(False, "failed", f"{both}: the re-measurement did not succeed{because}; kept 0")
    kept = round_toward_one(min(first, second))
    which = "the first" if first <= second else "the re-measurement"
    if second >= (1 - tolerance) * first:
        return done(True, "tolerance", f"{both}: within {tolerance:.0%}; kept {_score(kept)}x ({which}, the lower)")
    if first_interval and second_interval and second_interval[1] >= first_interval[0]:
        return done(True, "intervals-overlap", f"{both}: below the first by more than {tolerance:.0%} but within "
                    f"the two intervals; kept {_score(kept)}x ({which}, the lower)")
    r1, r2 = ref_ms
    if r1 and r2 and 0 < r2 < r1 and second >= (1 - tolerance) * first * (r2 / r1):
        return done(True, "reference-moved", f"{both}: the reference ran {1 - r2 / r1:.0%} faster the second "
                    f"time ({r1:.4g} -> {r2:.4g} ms), which explains the drop; kept {_score(kept)}x ({which}, "
                    "the lower)")
    return done(False, "mismatch", f"{both}: below the first by more than {tolerance:.0%}, outside both intervals"
                f"{' and the reference steady' if r1 and r2 else ''}; kept {_score(kept)}x (the re-measurement, "
                "the lower; flagged reverify-disagreed)")


# What a re-measurement's timing keeps in ``timing.reverify.detail`` (report only, ~1 KB): why it differs from the
# first. H100 2026-12-07 (c31/c32): two fresh-process re-measurements of KernelBench L1 losses under torch.compile
# came out 13-24% lower, flagged host-bound, and only their interval and flags were kept to say why.
REVERIFY_DETAIL = ("clock", "ref_median_ms", "cand_median_ms", "stop", "rounds", "dropped_blocks",
                   "harness_charge_ms", "harness_charges_ms", "harness_held_ms", "empty_span_ms_ref",
                   "empty_span_ms_cand", "held_work_ms_ref", "held_work_ms_cand", "stretch_charge_ms",
                   "outside_charge_ms", "host_charge_ms", "host_cpu_ms_ref", "host_cpu_ms_cand", "host_probe",
                   "graphs", "first_call_s", "phases_s")


def judge_reverify(first: float, first_timing: dict | None, second: float, second_ok: bool,
                   second_timing: dict | None, tolerance: float, *, mode: str, second_flags: list | None = None,
                   second_error: str | None = None) -> tuple[ReverifyVerdict, dict]:
    """``reverify_verdict`` on two evaluations' speedups and timing dicts (their intervals and reference times),
    and the ``timing.reverify`` record both re-verification paths store (the evaluator's fresh processes and the
    queue's other worker): both numbers, the second's interval, the tolerance, the mode, the verdict, and the
    second's own flags and error (a re-measurement failed by a fatal flag alone, reference-slowed on a loaded
    host, has no error: its flags say why; CI's loaded 2-core runner once read a bare ``reverify-mismatch``), and
    ``detail``: the second's timing keys named in ``REVERIFY_DETAIL`` (its medians, charges, phases)."""
    flags = [str(f) for f in (second_flags or [])]
    error = str(second_error)[:500] if second_error else None
    fatal = ", ".join(f for f in flags if f in FATAL)
    first_line = error.strip().splitlines()[0][:200] if error and error.strip() else ""
    because = "; ".join(x for x in (fatal, first_line) if x)
    v = reverify_verdict(first, second, second_ok, tolerance, first_interval=timing_interval(first_timing),
                         second_interval=timing_interval(second_timing),
                         ref_ms=(timing_ref_ms(first_timing), timing_ref_ms(second_timing)), failed_because=because)
    t2 = second_timing or {}
    detail = {k: t2[k] for k in REVERIFY_DETAIL if k in t2}
    return v, {"first_speedup": first, "speedup": second, "interval": timing_interval(second_timing),
               "tolerance": tolerance, "mode": mode, **v.to_dict(), "success": bool(second_ok), "flags": flags,
               "error": error, "detail": detail}


def timing_interval(timing: dict | None) -> tuple[float, float] | None:
    """(ci_low, ci_high) of an evaluation's timing dict, or None where it has none (a fake, a failed run)."""
    t = timing or {}
    lo, hi = t.get("ci_low"), t.get("ci_high")
    return (float(lo), float(hi)) if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else None


def timing_ref_ms(timing: dict | None) -> float | None:
    """The reference's median time per call (ms) of an evaluation's timing dict, or None."""
    v = (timing or {}).get("ref_median_ms")
    return float(v) if isinstance(v, (int, float)) and v > 0 else None

