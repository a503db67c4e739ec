"""Exemplar sampling: the bucket sampler's distribution against the paper's formula (chi-square over 20k
draws), distinct buckets, uniform within a bucket, temperature limits; island migration and persistence;
the store side (pool of successes, snapshot ids) on SQLite and Postgres."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from kernelrl.config.stages import SamplerConfig
from kernelrl.errors import ConfigError
from kernelrl.store.sampling import (
    BucketSampler,
    Exemplar,
    IslandSampler,
    RandomSampler,
    load_pool,
    make_sampler,
    sample_exemplars,
)

DRAWS = 20_000

# buckets of width 0.1: 5 -> {0.50, 0.55}, 10 -> {1.00, 1.02, 1.05}, 15 -> {1.5}, 20 -> {2.0, 2.05}, 30 -> {3.0}
SCORES = [0.50, 0.55, 1.00, 1.02, 1.05, 1.5, 2.0, 2.05, 3.0]
POOL = [Exemplar(i + 1, f"code {i + 1}", s) for i, s in enumerate(SCORES)]


def chi2_critical(df: int, z: float = 3.719) -> float:
    """Upper quantile of chi-square (Wilson-Hilferty); z=3.719 is the 0.9999 normal quantile."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(observed: Counter, expected: dict, total: int) -> float:
    return sum((observed.get(k, 0) - p * total) ** 2 / (p * total) for k, p in expected.items())


def formula(pool, width, tau):
    """The paper's equation, written independently of the implementation."""
    groups = {}
    for e in pool:
        groups.setdefault(math.floor(round(e.speedup / width, 9)), []).append(e.speedup)
    means = {k: sum(v) / len(v) for k, v in groups.items()}
    centre = sum(means.values()) / len(means)
    z = {k: math.exp((m - centre) / tau) for k, m in means.items()}
    s = sum(z.values())
    return {k: v / s for k, v in z.items()}


def bucket_of(e, width=0.1):
    return math.floor(round(e.speedup / width, 9))


def test_bucket_probabilities_match_the_formula():
    for tau in (0.1, 0.5, 1.0, 3.0):
        got = BucketSampler(0.1, tau, 2).bucket_probabilities(POOL)
        want = formula(POOL, 0.1, tau)
        assert set(got) == {5, 10, 15, 20, 30} == set(want)
        for k in want:
            assert got[k] == pytest.approx(want[k], rel=1e-12)


@pytest.mark.parametrize("tau", [0.5, 1.0])
def test_first_draw_frequencies_match_the_formula(tau):
    s = BucketSampler(0.1, tau, 1)
    rng = random.Random(1)
    counts = Counter(bucket_of(s.sample(POOL, rng)[0]) for _ in range(DRAWS))
    p = formula(POOL, 0.1, tau)
    assert chi2(counts, p, DRAWS) < chi2_critical(len(p) - 1)
    for k in p:  # and a per-bucket tolerance of 4 standard deviations
        assert abs(counts[k] / DRAWS - p[k]) < 4 * math.sqrt(p[k] * (1 - p[k]) / DRAWS)


def test_pairs_follow_sequential_draws_without_replacement():
    tau = 0.7
    s = BucketSampler(0.1, tau, 2)
    rng = random.Random(2)
    p = formula(POOL, 0.1, tau)
    pairs = Counter()
    for _ in range(DRAWS):
        ex = s.sample(POOL, rng)
        b = [bucket_of(e) for e in ex]
        assert len(ex) == 2 and len(set(b)) == 2  # N distinct buckets, always
        pairs[frozenset(b)] += 1
    expected = {frozenset((i, j)): p[i] * p[j] / (1 - p[i]) + p[j] * p[i] / (1 - p[j])
                for i, j in itertools.combinations(p, 2)}
    assert sum(expected.values()) == pytest.approx(1.0)
    assert chi2(pairs, expected, DRAWS) < chi2_critical(len(expected) - 1)


def test_uniform_within_a_bucket():
    s = BucketSampler(0.1, 1.0, 5)  # 5 buckets, n=5: every bucket every time
    rng = random.Random(3)
    within = Counter()
    for _ in range(DRAWS // 4):
        ex = s.sample(POOL, rng)
        assert sorted(bucket_of(e) for e in ex) == [5, 10, 15, 20, 30]
        within.update(e.candidate_id for e in ex if bucket_of(e) == 10)
    n = DRAWS // 4
    assert chi2(within, {3: 1 / 3, 4: 1 / 3, 5: 1 / 3}, n) < chi2_critical(2)


def test_fewer_buckets_than_n_returns_all_buckets():
    pool = [Exemplar(1, "a", 1.0), Exemplar(2, "b", 1.01), Exemplar(3, "c", 2.0)]
    ex = BucketSampler(0.1, 1.0, 4).sample(pool, random.Random(0))
    assert sorted(bucket_of(e) for e in ex) == [10, 20]
    assert BucketSampler(0.1, 1.0, 2).sample([], random.Random(0)) == []


def test_temperature_limits():
    rng = random.Random(4)
    cold = BucketSampler(0.1, 0.01, 1)
    assert all(cold.sample(POOL, rng)[0].speedup == 3.0 for _ in range(2000))
    zero = BucketSampler(0.1, 0.0, 3)  # tau <= 0: best buckets first, deterministically
    assert [bucket_of(e) for e in zero.sample(POOL, rng)] == [30, 20, 15]
    hot = BucketSampler(0.1, 1e6, 1)  # tau -> inf: uniform over buckets (not over exemplars)
    counts = Counter(bucket_of(hot.sample(POOL, rng)[0]) for _ in range(DRAWS))
    assert chi2(counts, {k: 0.2 for k in (5, 10, 15, 20, 30)}, DRAWS) < chi2_critical(4)


def test_bucket_edges_and_validation():
    s = BucketSampler(0.1, 1.0, 1)
    assert list(s.buckets([Exemplar(1, "", 0.3), Exemplar(2, "", 0.2999)])) == [2, 3]
    with pytest.raises(ConfigError):
        BucketSampler(0, 1.0, 1)
    assert BucketSampler(0.1, 1.0, 0).sample(POOL, random.Random(0)) == []


def test_random_sampler_distinct_and_uniform():
    s = RandomSampler(3)
    rng = random.Random(5)
    counts = Counter()
    for _ in range(DRAWS // 3):
        ex = s.sample(POOL, rng)
        assert len({e.candidate_id for e in ex}) == 3
        counts.update(e.candidate_id for e in ex)
    total = sum(counts.values())
    assert chi2(counts, {e.candidate_id: 1 / len(POOL) for e in POOL}, total) < chi2_critical(len(POOL) - 1)


def test_make_sampler_from_config():
    assert isinstance(make_sampler(SamplerConfig()), BucketSampler)
    s = make_sampler(SamplerConfig(kind="island", n_islands=3, migration_interval=2, n_exemplars=4))
    assert isinstance(s, IslandSampler) and s.n_islands == 3 and s.n == 4
    assert isinstance(make_sampler(SamplerConfig(kind="random")), RandomSampler)
    with pytest.raises(ConfigError, match="sampler.kind"):
        make_sampler(SamplerConfig(kind="nope"))


# -- islands --------------------------------------------------------------------------------------------------------
def test_island_round_robin_assignment_and_best_first():
    s = IslandSampler(n_islands=2, migration_interval=100, n=2)
    rng = random.Random(0)
    # ids 1..9: odd ids -> island 1, even -> island 0 (candidate_id % n_islands)
    first = s.sample(POOL, rng, group="t")
    assert s.last_island("t") == 0 and first[0].candidate_id == 8  # island 0's best (2.05)
    second = s.sample(POOL, rng, group="t")
    assert s.last_island("t") == 1 and second[0].candidate_id == 9  # island 1's best (3.0)
    assert all(e.candidate_id % 2 == 1 for e in second)
    # a candidate assigned explicitly stays where its prompt came from
    s.assign(100, 1, group="t")
    pool = POOL + [Exemplar(100, "new", 5.0)]
    assert [len(m) for m in s.island_members(pool, "t")] == [4, 6]


def test_island_migration_wipes_the_worse_half_and_reseeds():
    s = IslandSampler(n_islands=4, migration_interval=3, n=2)
    pool = [Exemplar(i, f"c{i}", sp) for i, sp in [(1, 5.0), (2, 1.0), (3, 0.5), (5, 2.0), (6, 0.9), (7, 0.4)]]
    # islands: 0: [] , 1: [1 (5.0), 5 (2.0)], 2: [2 (1.0), 6 (0.9)], 3: [3 (0.5), 7 (0.4)]
    assert [[e.candidate_id for e in m] for m in s.island_members(pool, "t")] == [[], [1, 5], [2, 6], [3, 7]]
    assert not s.advance(pool, "t") and not s.advance(pool, "t")
    assert s.advance(pool, "t")  # round 3: migration
    members = [[e.candidate_id for e in m] for m in s.island_members(pool, "t")]
    # better half: islands 1 (best 5.0) and 2 (1.0); worse: 3 (0.5) and 0 (empty, worst)
    assert members[1] == [1, 5] and members[2] == [2, 6]
    assert members[0] == [1]  # the worst island gets the best island's best
    assert members[3] == [2]  # the next worst gets the second island's best
    # wiped candidates are not re-assigned when they show up again
    assert 7 not in sum(members, [])
    assert s.state_dict()["groups"]["t"]["migrations"] == 1


def test_island_state_survives_a_restart(tmp_path):
    s = IslandSampler(3, 2, 2)
    rng = random.Random(0)
    for _ in range(3):
        s.sample(POOL, rng, group=7)
    s.assign(50, 2, group=7)
    s.advance(POOL, 7)
    s.advance(POOL, 7)
    path = tmp_path / "islands.json"
    s.save(path)
    t = IslandSampler(3, 2, 2)
    assert t.load(path)
    assert t.state_dict() == s.state_dict()
    r1, r2 = random.Random(9), random.Random(9)
    assert s.sample(POOL, r1, group=7) == t.sample(POOL, r2, group=7)
    assert not IslandSampler(3, 2, 2).load(tmp_path / "missing.json")
    with pytest.raises(ConfigError):
        IslandSampler(4, 2, 2).load(path)


# -- the store ------------------------------------------------------------------------------------------------------
def _result(ok: bool, speedup: float, flags=()):
    return {"executable": ok, "correct": ok, "speedup": speedup, "flags": list(flags), "device_type": "cpu",
            "evaluator_version": "test"}


def test_sample_exemplars_from_the_store(store):
    from kernelrl.tasks import get_task

    task = get_task("09_Swish")
    tid = store.upsert_task(task)
    other = store.upsert_task(get_task("02_Softmax"))
    ids = [store.add_candidate(tid, f"class ModelNew: x = {i}\n", origin_stage="test") for i in range(5)]
    store.add_evaluation(ids[0], _result(True, 1.5))
    e_fail = store.add_evaluation(ids[1], _result(False, 0.0))
    store.add_evaluation(ids[2], _result(True, 2.0, ["timing-mismatch"]))  # fatal flag: not a success
    e3 = store.add_evaluation(ids[3], _result(True, 0.8))
    # ids[4] never evaluated; another task's candidate must not leak in
    oc = store.add_candidate(other, "class ModelNew: pass\n", origin_stage="test")
    store.add_evaluation(oc, _result(True, 9.0))

    pool, snap = load_pool(store, tid)
    assert {e.candidate_id: e.speedup for e in pool} == {ids[0]: 1.5, ids[3]: 0.8}
    assert snap == e3 and snap > e_fail

    # a later re-evaluation changes the latest score; as_of rebuilds the old pool
    e_new = store.add_evaluation(ids[0], _result(False, 0.0))
    pool2, snap2 = load_pool(store, tid)
    assert snap2 == e_new and {e.candidate_id for e in pool2} == {ids[3]}
    old, snap_old = load_pool(store, tid, as_of=snap)
    assert snap_old == snap and {e.candidate_id for e in old} == {ids[0], ids[3]}

    ex, s = sample_exemplars(store, tid, BucketSampler(0.1, 1.0, 2), random.Random(0), as_of=snap)
    assert s == snap and sorted(e.candidate_id for e in ex) == sorted([ids[0], ids[3]])
    assert ex[0].source.startswith("class ModelNew")
    # run scope: only candidates that the run's attempts produced
    store.add_attempt(tid, stage="optimize", run_name="r1", response="x", candidate_id=ids[3], dedup_key="r1:0")
    store.add_attempt(tid, stage="optimize", run_name="r1", response="y", parse_error="no code", dedup_key="r1:1")
    mine, snap_r1 = load_pool(store, tid, run_name="r1")
    assert [e.candidate_id for e in mine] == [ids[3]] and snap_r1 == e3
    assert load_pool(store, tid, run_name="nobody") == ([], 0)
    ex, _ = sample_exemplars(store, tid, RandomSampler(2), random.Random(0), run_name="r1")
    assert [e.candidate_id for e in ex] == [ids[3]]
    empty, s0 = sample_exemplars(store, store.upsert_task(get_task("03_LayerNorm")), RandomSampler(2),
                                 random.Random(0))
    assert empty == [] and s0 == 0


def test_island_state_path_persists_every_change(tmp_path):
    path = tmp_path / "run" / "islands.json"
    cfg = SamplerConfig(kind="island", n_islands=2, migration_interval=1, n_exemplars=2)
    s = make_sampler(cfg, state_path=path)
    s.sample(POOL, random.Random(0), group="t")
    s.assign(77, 1, group="t")
    s.advance(POOL, "t")  # interval 1: migrates
    t = make_sampler(cfg, state_path=path)  # a restart
    assert t.state_dict() == s.state_dict() and t.state_dict()["groups"]["t"]["migrations"] == 1
    assert isinstance(make_sampler(SamplerConfig(), state_path=path), BucketSampler)
