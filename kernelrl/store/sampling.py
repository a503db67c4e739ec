"""Exemplar sampling for contrastive prompts: the paper's bucket sampler, island-based, and uniform random.

    sampler = make_sampler(SamplerConfig(kind="bucket", n_exemplars=2, bucket_width=0.1, temperature=1.0))
    exemplars, snapshot = sample_exemplars(store, task_id, sampler, random.Random(0))

The pool of a task is every candidate whose latest evaluation succeeded (executable, correct, speedup > 0,
no fatal integrity flag), scored by that speedup; ``load_pool`` narrows it to one run's candidates and to one
device type's measurements (what crl uses by default: ``crl.pool``). ``snapshot`` is the highest
evaluation id of the task the pool was read at; a prompt records it (``attempts.snapshot``) and
``sample_exemplars(..., as_of=snapshot)`` rebuilds exactly that pool later.

Samplers take ``sample(pool, rng, group=...)``; ``group`` names whose state to use (the task) for stateful
samplers (island) and is ignored by the others.
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kernelrl.errors import ConfigError

# Evaluation flags that mean "not a success" whatever the stored booleans say (mirror of
# kernelrl.evaluation.flags.FATAL; kept here so the store does not import the evaluator and torch).
_FATAL = {
    "build-failed", "crashed", "timeout", "out-of-memory", "runtime-error", "wrong-output", "shape-mismatch",
    "output-subclass", "non-finite", "timing-mismatch", "reference-slowed", "faster-than-light",
    "reverify-mismatch", "evaluation-failed", "reference-disturbed", "work-outside-timing",
}
FATAL_FLAGS = frozenset(_FATAL)


@dataclass(frozen=True)
class Exemplar:
    candidate_id: int | None
    source: str
    speedup: float


class Sampler(Protocol):
    n: int

    def sample(self, pool: list[Exemplar], rng: random.Random, group: Any = None) -> list[Exemplar]: ...


def _bucket_of(score: float, width: float) -> int:
    # A small epsilon keeps exact multiples (0.3/0.1 = 2.9999999999999996) in their own bucket.
    return math.floor(score / width + 1e-9)


def _softmax(logits: list[float]) -> list[float]:
    m = max(logits)
    w = [math.exp(x - m) for x in logits]
    s = sum(w)
    return [x / s for x in w]


class BucketSampler:
    """The paper's sampler. Exemplars are grouped into buckets by score: bucket ``i = floor(score / width)``.
    With ``m_i`` the mean score in bucket ``i`` and ``m`` the mean of all bucket means (each bucket counts once,
    whatever its size), bucket ``i`` is drawn with

        P(B_i) = exp((m_i - m) / tau) / sum_j exp((m_j - m) / tau)

    ``N = n`` distinct buckets are drawn **sequentially without replacement**: the first with P above; each
    next one among the buckets not drawn yet, with the same weights renormalised over them (equivalently a
    softmax of the same centred means restricted to the remaining buckets: centring by ``m`` cancels). Then one
    exemplar is drawn uniformly inside each chosen bucket. With fewer than N buckets every bucket is used once.
    ``tau <= 0`` is the limit tau -> 0: buckets are taken best first. Exemplars are returned in draw order.
    """

    def __init__(self, width: float = 0.1, temperature: float = 1.0, n: int = 2):
        if width <= 0:
            raise ConfigError(f"sampler.bucket_width: must be > 0, got {width}")
        if n < 0:
            raise ConfigError(f"sampler.n_exemplars: must be >= 0, got {n}")
        self.width, self.temperature, self.n = float(width), float(temperature), int(n)

    def buckets(self, pool: list[Exemplar]) -> dict[int, list[Exemplar]]:
        out: dict[int, list[Exemplar]] = defaultdict(list)
        for e in pool:
            out[_bucket_of(e.speedup, self.width)].append(e)
        return dict(sorted(out.items()))

    def bucket_probabilities(self, pool: list[Exemplar]) -> dict[int, float]:
        """P(B_i) of the first draw, per bucket index (the formula above)."""
        b = self.buckets(pool)
        if not b:
            return {}
        idx = list(b)
        means = [sum(e.speedup for e in b[i]) / len(b[i]) for i in idx]
        centre = sum(means) / len(means)
        if self.temperature <= 0:
            best = max(means)
            winners = [i for i, m in zip(idx, means) if m == best]
            return {i: (1.0 / len(winners) if i in winners else 0.0) for i in idx}
        return dict(zip(idx, _softmax([(m - centre) / self.temperature for m in means])))

    def sample_buckets(self, pool: list[Exemplar], rng: random.Random) -> list[int]:
        probs = self.bucket_probabilities(pool)
        remaining = dict(probs)
        chosen: list[int] = []
        for _ in range(min(self.n, len(remaining))):
            total = sum(remaining.values())
            keys = list(remaining)
            if total <= 0:  # tau -> 0 with the best buckets used up: next best by mean
                b = self.buckets(pool)
                keys.sort(key=lambda i: -sum(e.speedup for e in b[i]) / len(b[i]))
                pick = keys[0]
            else:
                r = rng.random() * total
                acc = 0.0
                pick = keys[-1]
                for k in keys:
                    acc += remaining[k]
                    if r < acc:
                        pick = k
                        break
            chosen.append(pick)
            del remaining[pick]
        return chosen

    def sample(self, pool: list[Exemplar], rng: random.Random, group: Any = None) -> list[Exemplar]:
        b = self.buckets(pool)
        return [rng.choice(b[i]) for i in self.sample_buckets(pool, rng)]


class RandomSampler:
    """Uniform: n distinct exemplars (all of them when the pool is smaller)."""

    def __init__(self, n: int = 2):
        self.n = int(n)

    def sample(self, pool: list[Exemplar], rng: random.Random, group: Any = None) -> list[Exemplar]:
        return rng.sample(list(pool), min(self.n, len(pool)))


class IslandSampler:
    """Island-based sampling (AlphaEvolve/FunSearch style), state per group (task).

    - Every candidate belongs to an island: the island whose prompt produced it (``assign``), else island
      ``candidate_id % n_islands`` when it first shows up in a pool.
    - Each ``sample`` call uses the next island in turn (round robin, skipping empty islands) and returns that
      island's best exemplar plus ``n - 1`` others drawn uniformly from the same island. ``last_island(group)``
      says which island it was, so the caller can ``assign`` the resulting candidates to it.
    - ``advance(group)`` ends a round; every ``migration_interval`` rounds the islands are ranked by their best
      score and the worse half (floor(n_islands / 2), empty islands rank last) is wiped; each wiped island is
      reseeded with the best exemplar of one of the better islands (the best island reseeds the worst, and so
      on). Wiped candidates stay out of every island (they are not re-assigned when they reappear).
    - State is JSON (``state_dict`` / ``load_state_dict``, ``save(path)`` / ``load(path)``): it survives restarts.
    """

    def __init__(self, n_islands: int = 4, migration_interval: int = 10, n: int = 2,
                 state_path: str | Path | None = None):
        if n_islands < 1:
            raise ConfigError(f"sampler.n_islands: must be >= 1, got {n_islands}")
        if migration_interval < 1:
            raise ConfigError(f"sampler.migration_interval: must be >= 1, got {migration_interval}")
        self.n_islands, self.migration_interval, self.n = int(n_islands), int(migration_interval), int(n)
        self.groups: dict[str, dict[str, Any]] = {}
        # With a state path the state is loaded now and written back after every change (atomic replace).
        self.state_path = Path(state_path) if state_path else None
        if self.state_path is not None:
            self.load(self.state_path)

    def _persist(self) -> None:
        if self.state_path is not None:
            self.save(self.state_path)

    # -- state ----------------------------------------------------------------------------------------------------
    def _g(self, group: Any) -> dict[str, Any]:
        key = str(group)
        if key not in self.groups:
            self.groups[key] = {"round": 0, "next": 0, "last": None, "islands": [[] for _ in range(self.n_islands)],
                                "seen": [], "migrations": 0}
        return self.groups[key]

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "island", "n_islands": self.n_islands, "migration_interval": self.migration_interval,
                "groups": json.loads(json.dumps(self.groups))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("n_islands", self.n_islands) != self.n_islands:
            raise ConfigError(f"island state has {state.get('n_islands')} islands, the sampler {self.n_islands}")
        self.groups = {str(k): v for k, v in (state.get("groups") or {}).items()}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(self.state_dict(), f)
        os.replace(tmp, path)

    def load(self, path: str | Path) -> bool:
        path = Path(path)
        if not path.exists():
            return False
        self.load_state_dict(json.loads(path.read_text()))
        return True

    # -- membership -----------------------------------------------------------------------------------------------
    def assign(self, candidate_id: int, island: int, group: Any = None) -> None:
        g = self._g(group)
        if candidate_id in g["seen"]:
            return
        g["seen"].append(candidate_id)
        g["islands"][island % self.n_islands].append(candidate_id)
        self._persist()

    def _absorb(self, pool: list[Exemplar], g: dict[str, Any]) -> None:
        seen = set(g["seen"])
        for e in pool:
            if e.candidate_id is not None and e.candidate_id not in seen:
                g["seen"].append(e.candidate_id)
                g["islands"][e.candidate_id % self.n_islands].append(e.candidate_id)
                seen.add(e.candidate_id)

    def island_members(self, pool: list[Exemplar], group: Any = None) -> list[list[Exemplar]]:
        g = self._g(group)
        self._absorb(pool, g)
        by_id = {e.candidate_id: e for e in pool}
        return [[by_id[c] for c in isl if c in by_id] for isl in g["islands"]]

    def last_island(self, group: Any = None) -> int | None:
        return self._g(group)["last"]

    # -- sampling and migration -----------------------------------------------------------------------------------
    def sample(self, pool: list[Exemplar], rng: random.Random, group: Any = None) -> list[Exemplar]:
        g = self._g(group)
        members = self.island_members(pool, group)
        for k in range(self.n_islands):
            i = (g["next"] + k) % self.n_islands
            if members[i]:
                break
        else:
            g["last"] = g["next"] % self.n_islands
            g["next"] = (g["next"] + 1) % self.n_islands
            self._persist()
            return []
        g["last"] = i
        g["next"] = (i + 1) % self.n_islands
        self._persist()
        isl = sorted(members[i], key=lambda e: (-e.speedup, e.candidate_id or 0))
        if self.n <= 0:
            return []
        rest = isl[1:]
        return [isl[0]] + rng.sample(rest, min(self.n - 1, len(rest)))

    def advance(self, pool: list[Exemplar], group: Any = None) -> bool:
        """End of a round; migrates when due. True when a migration happened."""
        g = self._g(group)
        g["round"] += 1
        if g["round"] % self.migration_interval != 0 or self.n_islands < 2:
            self._persist()
            return False
        self.migrate(pool, group)
        return True

    def migrate(self, pool: list[Exemplar], group: Any = None) -> None:
        g = self._g(group)
        members = self.island_members(pool, group)
        best = [max((e.speedup for e in m), default=-math.inf) for m in members]
        order = sorted(range(self.n_islands), key=lambda i: (-best[i], i))  # best island first
        half = self.n_islands // 2
        better, worse = order[:self.n_islands - half], order[self.n_islands - half:]
        for k, w in enumerate(reversed(worse)):  # the worst island gets the best island's best
            src = better[k % len(better)]
            seed = max(members[src], key=lambda e: e.speedup, default=None)
            g["islands"][w] = [seed.candidate_id] if seed is not None else []
        g["migrations"] += 1
        self._persist()


def make_sampler(cfg, state_path: str | Path | None = None) -> BucketSampler | IslandSampler | RandomSampler:
    """A sampler from ``kernelrl.config.stages.SamplerConfig`` (or anything with the same fields).
    ``state_path``: where a stateful sampler (island) keeps its JSON state across restarts; ignored by others."""
    kind = getattr(cfg, "kind", "bucket")
    n = int(getattr(cfg, "n_exemplars", 2))
    if n < 0:
        raise ConfigError(f"sampler.n_exemplars: must be >= 0, got {n}")
    if kind == "bucket":
        return BucketSampler(cfg.bucket_width, cfg.temperature, n)
    if kind == "island":
        return IslandSampler(cfg.n_islands, cfg.migration_interval, n, state_path=state_path)
    if kind == "random":
        return RandomSampler(n)
    raise ConfigError(f"sampler.kind: expected bucket, island or random, got {kind!r}")


# -- the store side ---------------------------------------------------------------------------------------------------
def load_pool(store, task_id: int, *, as_of: int | None = None, run_name: str | None = None,
              device_type: str | None = None, device_kind: str | None = None,
              stages: list[str] | tuple[str, ...] | None = None) -> tuple[list[Exemplar], int]:
    """(successful exemplars of the task by their latest evaluation up to ``as_of``, snapshot id).

    ``run_name``: only candidates this run produced (``candidate_runs``, whoever produced them first; with
    ``stages``, only those stages of it): a run's own pool, which runs sharing one store do not contaminate;
    None: every candidate of the task. ``device_type`` (e.g. 'cpu', 'NVIDIA H100 80GB HBM3'): only evaluations
    measured on that device type count, so a CPU speedup is never an exemplar for a GPU prompt; ``device_kind``
    ('cpu' or 'cuda') does the same by kind when the exact GPU type is unknown here."""
    from sqlalchemy import func, select

    from kernelrl.store.models import CandidateRow, CandidateRunRow, EvaluationRow

    with store.session() as s:
        latest = (select(EvaluationRow.candidate_id, func.max(EvaluationRow.id).label("eid"))
                  .join(CandidateRow, CandidateRow.id == EvaluationRow.candidate_id)
                  .where(CandidateRow.task_id == task_id))
        if run_name is not None:
            mine = select(CandidateRunRow.candidate_id).where(CandidateRunRow.run_name == run_name)
            if stages:
                mine = mine.where(CandidateRunRow.stage.in_(list(stages)))
            latest = latest.where(CandidateRow.id.in_(mine))
        if device_type is not None:
            latest = latest.where(EvaluationRow.device_type == device_type)
        elif device_kind == "cpu":
            latest = latest.where(EvaluationRow.device_type == "cpu")
        elif device_kind == "cuda":
            latest = latest.where(EvaluationRow.device_type != "cpu")
        if as_of is not None:
            latest = latest.where(EvaluationRow.id <= as_of)
        latest = latest.group_by(EvaluationRow.candidate_id).subquery()
        rows = s.execute(
            select(CandidateRow.id, CandidateRow.source, EvaluationRow.id, EvaluationRow.executable,
                   EvaluationRow.correct, EvaluationRow.speedup, EvaluationRow.flags)
            .join(latest, latest.c.candidate_id == CandidateRow.id)
            .join(EvaluationRow, EvaluationRow.id == latest.c.eid)
            .order_by(CandidateRow.id)).all()
    snapshot = max((r[2] for r in rows), default=0)
    pool = [Exemplar(cid, src, float(sp)) for cid, src, _eid, ex, ok, sp, flags in rows
            if ex and ok and sp and sp > 0 and not (set(flags or []) & _FATAL)]
    return pool, snapshot


def sample_exemplars(store, task_id: int, sampler, rng: random.Random, *, as_of: int | None = None,
                     run_name: str | None = None, device_type: str | None = None,
                     device_kind: str | None = None) -> tuple[list[Exemplar], int]:
    """Draw exemplars for one prompt of ``task_id``: (exemplars, snapshot id of the pool they came from); the
    pool's filters are :func:`load_pool`'s."""
    pool, snapshot = load_pool(store, task_id, as_of=as_of, run_name=run_name, device_type=device_type,
                               device_kind=device_kind)
    return sampler.sample(pool, rng, group=task_id), snapshot
