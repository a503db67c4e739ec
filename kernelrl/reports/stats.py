"""Report statistics: pure functions over per-task speedups, no I/O (unit-tested against hand-computed values).

Definitions (the paper's, made explicit):
- A task is **successful** when its kernel is executable and correct and scored a speedup > 0. An unsuccessful
  task counts as speedup 0 in *every* statistic (mean, max, percentiles), exactly as the paper scores it, so a
  source that solves fewer tasks cannot look better by leaving the hard ones out.
- **faster**: successful with speedup strictly above 1.0 (scores are rounded toward 1, so 1.00 is not faster).
- **Percentiles** (p75/p50/p25) use linear interpolation between closest ranks (numpy's default, "type 7"):
  for sorted values v[0..n-1], p(q) = v[i] + (v[i+1] - v[i]) * f where i + f = q * (n - 1).
- **Geometric mean** is taken over the *successful* tasks only (a 0 would make it 0, and any floor would be an
  arbitrary choice that moves the number); ``geomean_n`` says how many tasks it covers, and the report prints
  it beside the success count so the two are read together.
- **custom_share**: the share of successful kernels whose own CUDA/Triton code built and ran
  (``custom_kernel_built`` from the evaluator), as opposed to PyTorch-level rewrites. Unknown counts as no.
- **eager_mean / eager_median** (``eager_n``): the evaluator's eager estimate (KernelBench-style per-call times with
  the host in them; report-only, never the score) over the successful tasks that have one. Not counted as 0 where
  missing: it is a second clock beside the score, not a score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

FASTER_THAN = 1.0  # "faster than the reference": speedup strictly above this


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) by linear interpolation between closest ranks; 0.0 for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    v = sorted(float(x) for x in values)
    if not v:
        return 0.0
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def geometric_mean(values: Iterable[float]) -> float | None:
    """exp(mean(log v)) over the strictly positive values; None when there are none."""
    logs = [math.log(float(x)) for x in values if x and float(x) > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def effective_speedups(speedups: Sequence[float], success: Sequence[bool] | None = None) -> list[float]:
    """Speedups with every unsuccessful entry (flagged False, or speedup <= 0 / NaN) set to 0."""
    out = []
    for i, s in enumerate(speedups):
        ok = (success is None or bool(success[i])) and s is not None and not math.isnan(float(s)) and float(s) > 0
        out.append(float(s) if ok else 0.0)
    return out


@dataclass(frozen=True)
class Summary:
    n: int  # tasks counted (successful or not)
    mean: float
    max: float
    p75: float
    p50: float
    p25: float
    success: int
    faster: int
    geomean: float | None  # over successful tasks only (see module docstring)
    geomean_n: int
    custom_kernels: int  # successful kernels with a custom CUDA/Triton kernel that built and ran
    custom_share: float | None  # custom_kernels / success; None when nothing succeeded
    # The evaluator's eager estimate (timing.eager: KernelBench-style per-call times, host included; report-only, not
    # the reward) over the successful tasks that have one: mean, median and how many. None / 0 where none has.
    eager_mean: float | None = None
    eager_median: float | None = None
    eager_n: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(speedups: Sequence[float], success: Sequence[bool] | None = None,
              custom: Sequence[bool | None] | None = None, eager: Sequence[float | None] | None = None) -> Summary:
    """Statistics of one group of tasks (one level, or all). ``success[i]`` False forces task i to 0. ``eager[i]``:
    task i's eager estimate (None: none); summarised over the successful tasks that have one, never as 0."""
    if success is not None and len(success) != len(speedups):
        raise ValueError("success must have one entry per speedup")
    if custom is not None and len(custom) != len(speedups):
        raise ValueError("custom must have one entry per speedup")
    if eager is not None and len(eager) != len(speedups):
        raise ValueError("eager must have one entry per speedup")
    eff = effective_speedups(speedups, success)
    ok = [s > 0 for s in eff]
    eager_values = [float(eager[i]) for i, good in enumerate(ok) if good and eager is not None
                    and eager[i] is not None and math.isfinite(float(eager[i])) and float(eager[i]) > 0]
    n_ok = sum(ok)
    n_custom = sum(1 for i, good in enumerate(ok) if good and custom is not None and custom[i] is True)
    gm_values = [s for s in eff if s > 0]
    return Summary(
        n=len(eff),
        mean=sum(eff) / len(eff) if eff else 0.0,
        max=max(eff) if eff else 0.0,
        p75=percentile(eff, 0.75),
        p50=percentile(eff, 0.50),
        p25=percentile(eff, 0.25),
        success=n_ok,
        faster=sum(1 for s in eff if s > FASTER_THAN),
        geomean=geometric_mean(gm_values),
        geomean_n=len(gm_values),
        custom_kernels=n_custom,
        custom_share=(n_custom / n_ok) if n_ok else None,
        eager_mean=(sum(eager_values) / len(eager_values)) if eager_values else None,
        eager_median=percentile(eager_values, 0.5) if eager_values else None,
        eager_n=len(eager_values),
    )


def summarize_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Summary]:
    """Per-level and overall summaries of report rows (dicts with level, success, speedup, custom_kernel_built).

    Keys: ``"all"`` and ``"L<level>"`` for each level present, in level order.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {"all": list(rows)}
    for lvl in sorted({int(r["level"]) for r in rows}):
        groups[f"L{lvl}"] = [r for r in rows if int(r["level"]) == lvl]
    return {
        name: summarize([float(r.get("speedup") or 0.0) for r in rs], [bool(r.get("success")) for r in rs],
                        [r.get("custom_kernel_built") for r in rs], [r.get("eager_speedup") for r in rs])
        for name, rs in groups.items()
    }


def log_speedups(speedups: Sequence[float], success: Sequence[bool] | None = None) -> list[float]:
    """Natural log of the successful speedups (unsuccessful tasks have no log; the plot counts them apart)."""
    return [math.log(s) for s in effective_speedups(speedups, success) if s > 0]


def histogram(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Counts per bin [e_i, e_{i+1}) with the last bin closed; values outside the edges are not counted."""
    if len(edges) < 2:
        raise ValueError("need at least two bin edges")
    counts = [0] * (len(edges) - 1)
    for v in values:
        for i in range(len(counts)):
            last = i == len(counts) - 1
            if edges[i] <= v < edges[i + 1] or (last and v == edges[i + 1]):
                counts[i] += 1
                break
    return counts


def log_bins(values: Sequence[float], width: float = 0.25) -> list[float]:
    """Bin edges of the given width covering ``values`` and 0 (speedup 1), aligned on multiples of width."""
    lo = min([0.0, *values])
    hi = max([0.0, *values])
    start = math.floor(lo / width) * width
    stop = math.ceil(hi / width) * width
    if stop <= start:
        stop = start + width
    n = int(round((stop - start) / width))
    return [round(start + i * width, 10) for i in range(n + 1)]


def technique_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per technique tag over the *successful* rows: count, share, mean speedup with and without the tag.

    Rows carry ``techniques`` (a list of tags). Sorted by count, then name.
    """
    ok = [r for r in rows if r.get("success") and float(r.get("speedup") or 0) > 0]
    tags = sorted({t for r in ok for t in (r.get("techniques") or [])})
    out = []
    for t in tags:
        with_t = [float(r["speedup"]) for r in ok if t in (r.get("techniques") or [])]
        without = [float(r["speedup"]) for r in ok if t not in (r.get("techniques") or [])]
        out.append({
            "technique": t,
            "count": len(with_t),
            "share": len(with_t) / len(ok),
            "mean_speedup": sum(with_t) / len(with_t),
            "median_speedup": percentile(with_t, 0.5),
            "geomean_speedup": geometric_mean(with_t),
            "mean_speedup_without": (sum(without) / len(without)) if without else None,
        })
    out.sort(key=lambda d: (-d["count"], d["technique"]))
    return out
