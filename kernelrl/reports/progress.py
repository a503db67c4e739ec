"""A benchmark's estimate up front, its progress with the time left, and its report written as it goes.

    tracker = BenchProgress(n_kernels, cfg, write_partial=lambda done: ..., log_fn=_log_progress)
    tracker.announce()                         # "bench: 66 kernels, ~2 min 20 s each ... about 2 h 34 min"
    scorer.score(picks, progress=tracker)      # each kernel: its result line, then "[3/66] ... ~14 min left"

Why: ``kernelrl bench --suite builtin --source seeds`` with the final protocol's defaults (20 s of timing and
1,000 correctness inputs per kernel) ran for hours on a CPU without saying so, and a run killed after 10 minutes
had scored 4 kernels and written nothing (issue 33). The estimate is rough (it cannot know a task's size before
running it) and says what makes the run shorter; the time left is measured from the kernels done so far; the
partial report (every file but the plots) is rewritten after each kernel, so what is scored is never lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kernelrl.reports.runner")

# Rough per-kernel costs for the estimate up front, measured on the 2-core CPU machine (issue 33: ~2.3 min per
# kernel with 20 s of timing and 1,000 correctness inputs): starting the sandboxed workers and loading both
# modules, the timing (the budget plus calibration and warm-up), and each correctness input (fresh inputs, both
# modules, the comparison). A GPU runs the inputs ~10x faster; the start-up is the same order.
START_S = {"cpu": 10.0, "cuda": 15.0}
TIMING_FACTOR = 1.3
PER_INPUT_S = {"cpu": 0.1, "cuda": 0.01}
PARTIAL_EVERY_S = 2.0  # the partial report is rewritten at most this often (it is re-read and re-rendered whole)


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def per_kernel_estimate_s(budget_s: float, correctness_trials: int, device: str) -> float:
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    return START_S[kind] + TIMING_FACTOR * float(budget_s) + PER_INPUT_S[kind] * int(correctness_trials)


class BenchProgress:
    """The ``progress`` callback of ``Scorer.score``: logs each kernel's result, the count and the time left,
    and has the partial report rewritten (``write_partial(done)``, ``done`` the results so far by pick id)."""

    def __init__(self, total: int, cfg, *, write_partial: Callable[[dict[int, Any]], None] | None = None,
                 log_fn: Callable | None = None, max_minutes: float | None = None, local_workers: int = 1):
        self.total = total
        self.local_workers = local_workers  # 0: the kernels go to `kernelrl worker` processes (an evaluator fleet)
        self.cfg = cfg
        self.write_partial = write_partial
        self.log_fn = log_fn
        self.max_minutes = max_minutes
        self.done: dict[int, Any] = {}
        self.t0 = time.monotonic()
        self.last_write = 0.0

    def announce(self) -> None:
        from kernelrl.evaluation.service import resolve_device

        device = resolve_device(self.cfg.device)  # 'auto': what the scorer's service will use
        where = device if self.local_workers > 0 else f"the evaluator workers ({device.split(':')[0]} jobs)"
        each = per_kernel_estimate_s(self.cfg.budget_s, self.cfg.correctness_trials, device)
        total = each * self.total
        cap = (f"; --max-minutes {self.max_minutes:g} stops it sooner" if self.max_minutes and
               self.max_minutes * 60 < total else "")
        log.warning("bench: %d kernels on %s, %g s of timing and %d correctness inputs each: roughly %s per kernel, "
                    "about %s in all%s (fewer with --budget-s, --correctness-trials, --levels, --tasks, "
                    "--task-limit or --max-minutes); the report is written as kernels finish",
                    self.total, where, self.cfg.budget_s, self.cfg.correctness_trials, duration(each),
                    duration(total), cap)

    def __call__(self, n_done: int, total: int, pick, res) -> None:
        self.done[id(pick)] = res
        if self.log_fn is not None:
            self.log_fn(n_done, total, pick, res)
        elapsed = time.monotonic() - self.t0
        left = elapsed / max(n_done, 1) * (total - n_done)
        stored = " (from the store: " + f"{res.get('evaluated_at')}, {res.get('evaluator_version')})" if (
            isinstance(res, dict) and res.get("cached")) else ""
        log.info("bench: %d of %d kernels scored in %s%s%s", n_done, total, duration(elapsed),
                    f", ~{duration(left)} left" if n_done < total else "", stored)
        now = time.monotonic()
        if self.write_partial is not None and n_done < total and now - self.last_write >= PARTIAL_EVERY_S:
            self.last_write = now
            try:
                self.write_partial(self.done)
            except Exception as e:  # a partial report is a convenience: never stop the scoring over it
                log.warning("could not write the partial report: %s", e)


def stored_note(results: list[Any]) -> str | None:
    """A line for the log and the report when some final scores were answered from the store (a resumed bench
    step reuses those stored under the identical protocol) rather than measured now."""
    unique = {id(r): r for r in results if isinstance(r, dict)}.values()
    stored = [r for r in unique if r.get("cached")]
    if not stored:
        return None
    dates = sorted({str(r.get("evaluated_at")) for r in stored if r.get("evaluated_at")})
    versions = ", ".join(sorted({str(r.get("evaluator_version")) for r in stored}))
    when = f"{dates[0]} to {dates[-1]} UTC" if len(dates) > 1 else f"{dates[0]} UTC" if dates else "earlier"
    return (f"{len(stored)} of {len(unique)} final scores come from the store (measured {when} by {versions} under "
            "the identical protocol), not from this run; `kernelrl pipeline run --only bench --force` measures "
            "them again")
