"""Score kernels with the final-evaluation protocol through the evaluation service; results stored as 'final'.

``final_config`` turns the recipe's ``EvalConfig`` into the final protocol (the bench's budget and correctness
inputs, both configurable). ``Scorer.score(picks)`` sends each kernel through
``kernelrl.evaluation.service.EvalService`` (so the evaluation lands in the store with ``purpose='final'`` and
the job queue / remote workers are used when configured). Robust by design: a kernel whose evaluation raises is
recorded as unsuccessful with the harness error and the run goes on; ``deadline`` bounds the wall time (kernels
not reached are reported as "not evaluated").
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from kernelrl.config.stages import BenchConfig, EvalConfig
from kernelrl.errors import KernelRLError
from kernelrl.reports.sources import Pick
from kernelrl.tasks.loader import source_hash

log = logging.getLogger(__name__)
WALL_MARGIN_S = 300.0  # on top of the timing budget: compile (load_inline/Triton) + correctness inputs


def final_config(base: EvalConfig | None = None, *, bench: BenchConfig | None = None, device: str | None = None,
                 budget_s: float | None = None, correctness_trials: int | None = None) -> EvalConfig:
    """The final-evaluation protocol as an EvalConfig: the recipe's eval settings (device, caps) with the
    ``bench`` section's budget and correctness trials (the protocol's one home; explicit arguments win).
    ``max_wall_s`` is raised to cover the budget (the recipe's cap is sized for training rewards)."""
    base = base or EvalConfig()
    bench = bench or BenchConfig()
    budget = float(budget_s if budget_s is not None else bench.budget_s)
    trials = int(correctness_trials if correctness_trials is not None else bench.correctness_trials)
    if budget <= 0 or trials <= 0:
        raise KernelRLError(f"final protocol: budget ({budget}) and correctness trials ({trials}) must be > 0")
    return dataclasses.replace(
        base, device=device or base.device, budget_s=budget, correctness_trials=trials,
        max_wall_s=max(base.max_wall_s, budget + WALL_MARGIN_S))


def protocol_dict(cfg: EvalConfig, purpose: str = "final") -> dict[str, Any]:
    return {"device": cfg.device, "budget_s": cfg.budget_s, "correctness_trials": cfg.correctness_trials,
            "purpose": purpose, "train_mode": cfg.train_mode}


def _failure(error: str) -> dict[str, Any]:
    return {"executable": False, "correct": False, "speedup": 0.0, "flags": [], "error": error, "timing": {}}


class Scorer:
    """Evaluates picks one chunk at a time through the evaluation service (in-process workers by default)."""

    def __init__(self, store, cfg: EvalConfig, *, local_workers: int = 1, purpose: str = "final",
                 run_name: str | None = None, per_kernel_timeout_s: float | None = None, reuse: bool | str = False):
        """``reuse``: let the service answer from a stored evaluation of the same source (same evaluator version
        and device type). Off for final scores: the service's cache does not compare budgets or correctness
        inputs, so an earlier short evaluation would stand in for the protocol asked for here. ``"same-settings"``:
        reuse only an evaluation of this purpose stored under identical settings (a resumed run's own results)."""
        self.store = store
        self.cfg = cfg
        self.purpose = purpose
        self.run_name = run_name
        self.local_workers = local_workers
        self.reuse = reuse
        self.timeout_s = per_kernel_timeout_s or (cfg.max_wall_s + WALL_MARGIN_S)
        self._service = None
        self._request = None

    def close(self) -> None:
        """Stop the service's in-process workers (a running evaluation finishes first)."""
        if self._service is not None:
            self._service.close()
            self._service = None

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- backends ---------------------------------------------------------------------------------------------
    def _get_service(self):
        if self._service is None:
            try:
                from kernelrl.evaluation.service import EvalRequest, EvalService
            except ImportError as e:
                raise KernelRLError(f"the evaluation service is not available ({e})") from None
            self._service = EvalService(self.store, self.cfg, local_workers=self.local_workers,
                                        use_cache=self.reuse)
            self._request = EvalRequest
        return self._service

    def _evaluate(self, chunk: list[Pick]) -> list[dict[str, Any]]:
        reqs = [self._request(p.task, p.source, candidate_id=p.candidate_id, purpose=self.purpose,
                              origin_stage=p.origin or "import", run_name=self.run_name) for p in chunk]
        return list(self._get_service().evaluate_many(reqs, timeout_s=self.timeout_s * len(chunk)))

    # -- scoring ----------------------------------------------------------------------------------------------
    def score(self, picks: list[Pick], *, deadline: float | None = None, chunk_size: int = 1,
              progress: Callable[[int, int, Pick, dict[str, Any] | None], None] | None = None
              ) -> list[dict[str, Any] | None]:
        """One result dict per pick (None: not evaluated because the deadline passed or it had no code)."""
        results: list[dict[str, Any] | None] = [None] * len(picks)
        # the same kernel twice (e.g. the best of two ladder rungs) is timed once and shared
        first: dict[tuple[str, str], int] = {}
        twins: dict[int, int] = {}
        todo = []
        for i, p in enumerate(picks):
            if not p.source:
                continue
            key = (p.task.key, source_hash(p.source))
            if key in first:
                twins[i] = first[key]
            else:
                first[key] = i
                todo.append(i)
        if not todo:
            return results
        self._get_service()
        done = 0
        for start in range(0, len(todo), max(1, chunk_size)):
            if deadline is not None and time.time() >= deadline:
                log.warning("time budget spent: %d of %d kernels not evaluated", len(todo) - start, len(todo))
                break
            idx = todo[start:start + max(1, chunk_size)]
            chunk = [picks[i] for i in idx]
            try:
                out = self._evaluate(chunk)
            except KernelRLError:
                raise
            except Exception as e:  # a harness failure on one kernel must not abort the report
                log.error("evaluation of %s failed: %s", [p.task.key for p in chunk], e)
                log.debug("%s", traceback.format_exc())
                out = [_failure(f"harness error: {type(e).__name__}: {e}") for _ in chunk]
            for i, r in zip(idx, out):
                results[i] = r
                done += 1
                if progress:
                    progress(done, len(todo), picks[i], r)
        for i, j in twins.items():
            results[i] = results[j]
        return results
