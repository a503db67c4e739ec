"""Timing statistics.

The score is estimated from *paired rounds*: in each round the reference and the candidate each run the same k
fresh input sets back to back (random order), and the parent's clock gives each side's time for those k calls.
The statistic is the median of the per-round ratios t_ref / t_cand with a distribution-free confidence interval
from order statistics (no normality assumed; one slow round moves it by one rank, not by its size). The
reported score is the interval's *lower* bound rounded toward 1: what the measurement supports, never more.

The paper's statistic (7 contiguous buckets of rounds, median of the bucket means, spread of the means) is kept
as a diagnostic (``bucket_stats``): bucket means of ratios are fragile to single outlier rounds, and the paper's
"discard when the spread is large" throws the measurement away instead of reporting what is known.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


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
                "harness_tolerance_ms": round(self.excess_se_per_call * 1e3, 6)}


def paired_stats(ref_go: list[float], cand_go: list[float], ref_harness: list[float], cand_harness: list[float],
                 k: int, overhead: float = 0.0, block_of: list[int] | None = None) -> PairedStats:
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
    reference's harness time, but never more than a third of the candidate's median span in that block (so
    moving work out of the spans gains at most 1.5x, whatever the noise). An honest block that is slow by
    accident is charged alone, and moves the median of the ratios by one rank at most."""
    n = min(len(ref_go), len(cand_go))
    nh = min(len(ref_harness), len(cand_harness))
    if n == 0:
        return PairedStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    block_of = list(block_of) if block_of is not None else list(range(n))
    excess = [cand_harness[b] - ref_harness[b] for b in range(nh)]
    if nh:
        ref_med = statistics.median(ref_harness[:nh])
        ref_mad = statistics.median(abs(x - ref_med) for x in ref_harness[:nh])
        tol = max(3 * math.sqrt(2) * 1.4826 * ref_mad, 0.02 * ref_med)
    else:
        tol = 0.0
    # The forgiven share is also capped at a third of the candidate's own span time in that block: work moved
    # into the harness then gains at most a factor 1.5 over doing it in the span, however noisy the machine (a
    # loaded 2-core runner widened the noise tolerance past the whole deferred softmax: 18x for 2.8x honest).
    cand_span: dict[int, list[float]] = {}
    for i in range(n):
        cand_span.setdefault(block_of[i], []).append(cand_go[i] - min(overhead, 0.9 * cand_go[i]))
    tols = [min(tol, statistics.median(cand_span[b]) / 3) if b in cand_span else tol for b in range(nh)]
    charges = [max(0.0, e - t) for e, t in zip(excess, tols)]
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
    est, lo, hi = median_ci(ratios)
    exc = statistics.median(excess) if excess else 0.0
    return PairedStats(n, est, lo, hi, statistics.median(r_calls), statistics.median(c_calls),
                       statistics.mean(charged) / k, exc / k, (statistics.median(tols) if tols else tol) / k)


# -- re-verification: one rule for the in-process evaluator and the job workers ---------------------------------
def needs_reverify(speedup: float, *, reverify: bool, above: float) -> bool:
    """A successful speedup above ``above`` (EvalConfig.reverify_above) is measured again before it counts."""
    return bool(reverify) and speedup > above


def reverify_agrees(first: float, second: float, second_ok: bool, tolerance: float) -> bool:
    """The re-measurement confirms the first one: it succeeded and lies within ``tolerance`` (a fraction of the
    first). Agreeing results keep the lower of the two, rounded toward 1; the others score 0 and are flagged
    reverify-mismatch."""
    return bool(second_ok) and first > 0 and abs(second - first) <= tolerance * first

