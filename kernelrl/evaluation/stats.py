"""Timing statistics: the paper's bucketed median of paired ratios, and conservative rounding toward 1."""

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
                "spread": round(self.spread, 5), "score_raw": round(self.score, 5)}


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
