"""The evaluator's parts: statistics, the wire format, output comparison, digests, the sandbox (scrubbed env,
network, fresh uid, everything a candidate started is killed), the task audit, the result contract and the
``kernelrl eval`` command. The red team lives in tests/redteam/, the seed corpus check in
tests/test_evaluator_seeds.py."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import tempfile
import time
from pathlib import Path

import pytest
import torch

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import (
    EVALUATOR_VERSION,
    FATAL,
    FLAGS,
    EvalResult,
    bucket_stats,
    compare,
    evaluate,
    round_toward_one,
    static_checks,
)
from kernelrl.evaluation import flags as F
from kernelrl.evaluation.api import compare_digests
from kernelrl.evaluation.stats import block_ratios, hodges_lehmann_ci, median_ci, paired_stats
from kernelrl.evaluation.ipc import Channel, ProtocolError, bytes_to_tensor, tensor_to_bytes
from kernelrl.evaluation.sandbox import WorkerProcess, pids_of_uid, scrubbed_env
from kernelrl.evaluation.worker import _digest_round, _metas
from kernelrl.tasks import get_task

FAST = EvalConfig(device="cpu", budget_s=0.4, correctness_trials=4, reverify=False, max_wall_s=90,
                  spread_threshold=10.0, memory_limit_mb=4096)


# -- statistics ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("x, want", [
    (1.118, 1.11), (0.992, 1.00), (0.876, 0.88), (1.0, 1.0), (2.0, 2.0), (3.14159, 3.14), (0.5, 0.5),
    (0.123, 0.13), (1.00999, 1.0), (0.0, 0.0), (-1.0, 0.0), (float("nan"), 0.0), (float("inf"), 0.0),
])
def test_round_toward_one(x, want):
    assert round_toward_one(x) == want


def test_round_toward_one_never_moves_away_from_one():
    for i in range(1, 5000):
        x = i / 997
        r = round_toward_one(x)
        assert abs(r - 1) <= abs(x - 1) + 1e-12 and abs(r - x) < 0.01 + 1e-12


def test_bucket_stats_contiguous_buckets_median_and_spread():
    ratios = [1.0] * 10 + [2.0] * 10 + [3.0] * 10 + [4.0] * 10 + [5.0] * 10 + [6.0] * 10 + [7.0] * 10
    st = bucket_stats(ratios, 7)
    assert st.rounds == 70 and st.bucket_means == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert st.score == 4.0 and st.spread == pytest.approx((7 - 1) / 4)
    # buckets follow round order (contiguous), not sorted values
    st2 = bucket_stats([1.0, 3.0] * 35, 7)
    assert st2.bucket_means == [2.0] * 7 and st2.spread == 0.0


def test_bucket_stats_uneven_and_short():
    st = bucket_stats([2.0] * 15 + [10.0], 7)
    assert len(st.bucket_means) == 7 and st.score == 2.0
    assert sum(st.bucket_means) == pytest.approx(2.0 * 6 + (2.0 + 10.0) / 2) or st.bucket_means[-1] > 2.0
    assert bucket_stats([1.5, 2.5], 7).bucket_means == [1.5, 2.5]
    empty = bucket_stats([], 7)
    assert empty.rounds == 0 and empty.score == 0.0


def test_median_of_bucket_means_resists_outlier_rounds():
    ratios = [2.0] * 70
    ratios[5] = 500.0  # one absurd round (a hiccup of the reference) moves one bucket mean only
    assert bucket_stats(ratios, 7).score == 2.0


def test_median_ci_contains_the_median_and_narrows_with_samples():
    import random as _r

    rng = _r.Random(0)
    xs = [2.0 + rng.gauss(0, 0.1) for _ in range(400)]
    med, lo, hi = median_ci(xs)
    assert lo <= med <= hi and hi - lo < 0.05
    med9, lo9, hi9 = median_ci(xs[:9])
    assert lo9 <= med9 <= hi9 and (hi9 - lo9) > (hi - lo)
    assert median_ci([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # too few samples: the whole range
    assert median_ci([]) == (0.0, 0.0, 0.0)


def test_hodges_lehmann_interval_is_tighter_than_the_medians_and_robust():
    import random as _r

    rng = _r.Random(1)
    widths = {"hl": 0.0, "median": 0.0}
    for _ in range(20):
        xs = [2.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(60)]
        est, lo, hi = hodges_lehmann_ci(xs)
        _, mlo, mhi = median_ci(xs)
        assert lo <= est <= hi and abs(est / 2.0 - 1) < 0.03
        widths["hl"] += hi - lo
        widths["median"] += mhi - mlo
    assert widths["hl"] < 0.9 * widths["median"]  # the efficiency it is chosen for (on average over samples)
    wild = xs[:54] + [50.0] * 6  # 10% of the pairs hit by a stall, all in one direction
    west, wlo, whi = hodges_lehmann_ci(wild)
    assert abs(west / est - 1) < 0.05 and whi < 2.5
    assert hodges_lehmann_ci([]) == (0.0, 0.0, 0.0)
    assert hodges_lehmann_ci([0.0, 1.0, 2.0, 3.0]) == median_ci([0.0, 1.0, 2.0, 3.0])  # no log: order statistics


def test_paired_stats_interval_is_over_blocks_not_pairs():
    """Pairs of one block share the machine's state (seen on the H100: spans within a block agree, the level moves
    between blocks): the interval must reflect the spread of the blocks, not pretend 8x as many independent
    pairs (an interval over pairs let a repeat claim 14% over its 10x longer run)."""
    import random as _r

    rng = _r.Random(2)
    per, n_blocks = 8, 12
    level = [math.exp(rng.gauss(0, 0.1)) for _ in range(n_blocks)]
    rg = [10e-3 * level[i // per] * (1 + rng.gauss(0, 0.002)) for i in range(per * n_blocks)]
    cg = [5e-3 * (1 + rng.gauss(0, 0.002)) for _ in range(per * n_blocks)]
    bo = [i // per for i in range(per * n_blocks)]
    h = [1e-3] * n_blocks
    st = paired_stats(rg, cg, h, list(h), k=1, block_of=bo)
    _, plo, phi = hodges_lehmann_ci([r / c for r, c in zip(rg, cg)])
    assert (st.ci_high - st.ci_low) > 2 * (phi - plo)
    assert len(block_ratios([r / c for r, c in zip(rg, cg)], bo)) == n_blocks
    assert block_ratios([2.0, 8.0, 3.0], [0, 0, 1]) == pytest.approx([4.0, 3.0])


def _pairs(n_blocks, per_block, ref=10e-3, cand=5e-3, noise=0.0, seed=0):
    import random as _r

    rng = _r.Random(seed)
    rg = [ref * (1 + rng.gauss(0, noise)) for _ in range(n_blocks * per_block)]
    cg = [cand * (1 + rng.gauss(0, noise)) for _ in range(n_blocks * per_block)]
    block_of = [i // per_block for i in range(n_blocks * per_block)]
    return rg, cg, block_of


def test_paired_stats_honest_candidate_is_not_charged_and_score_is_the_lower_bound():
    rg, cg, bo = _pairs(10, 8, noise=0.02)
    h = [1e-3 + 1e-5 * (i % 3) for i in range(10)]
    st = paired_stats(rg, cg, h, list(h), k=10, overhead=0.0, block_of=bo)
    assert st.charge_per_call == 0.0
    assert st.ci_low <= st.estimate <= st.ci_high and abs(st.estimate - 2.0) < 0.05
    assert st.score == st.ci_low < 2.0


def test_paired_stats_charges_work_moved_into_the_harness_in_every_block_and_in_a_minority():
    rg, cg, bo = _pairs(10, 8)
    ref_h = [1e-3] * 10
    moved = 4e-3  # the candidate's span really takes 5 + 4 ms; it did 4 ms of it while staging
    everywhere = paired_stats(rg, [c - moved for c in cg], ref_h, [1e-3 + moved] * 10, k=1, block_of=bo)
    honest = paired_stats(rg, cg, ref_h, list(ref_h), k=1, block_of=bo)
    assert everywhere.estimate <= honest.estimate * 1.03  # no gain beyond the tolerance
    # Moving work in 4 blocks out of 10 (a median-based charge would miss it): those blocks are charged.
    cand_h = [1e-3 + (moved if b < 4 else 0.0) for b in range(10)]
    cg2 = [c - (moved if bo[i] < 4 else 0.0) for i, c in enumerate(cg)]
    minority = paired_stats(rg, cg2, ref_h, cand_h, k=1, block_of=bo)
    assert minority.estimate <= honest.estimate * 1.03 and minority.charge_per_call > 0


def test_paired_stats_tolerance_comes_from_the_reference_not_the_candidate():
    rg, cg, bo = _pairs(10, 8)
    ref_h = [1e-3] * 10
    # A candidate that makes its own harness noisy (to widen an allowance) while moving 3 ms in every block.
    cand_h = [1e-3 + 3e-3 + (20e-3 if b % 2 else 0.0) for b in range(10)]
    st = paired_stats(rg, [c - 3e-3 for c in cg], ref_h, cand_h, k=1, block_of=bo)
    honest = paired_stats(rg, cg, ref_h, list(ref_h), k=1, block_of=bo)
    assert st.estimate <= honest.estimate * 1.03


def test_paired_stats_a_noisy_reference_harness_forgives_at_most_the_allowance():
    """A loaded machine makes the reference's harness noisy, which widens the noise tolerance; a candidate that
    moves work into the harness must still gain at most 1 + span_cap: 1.2x at the default 0.2 (seen on a loaded
    2-core runner: 18x for an honest 2.8x before the cap)."""
    rg, cg, bo = _pairs(10, 8)  # reference 10 ms, honest candidate 5 ms per span
    ref_h = [1e-3 + (30e-3 if b % 2 else 0.0) for b in range(10)]  # MAD 15 ms: tolerance ~95 ms
    moved = 4.5e-3  # all but 0.5 ms of the candidate's span done in the harness
    st = paired_stats(rg, [c - moved for c in cg], ref_h, [h + moved for h in ref_h], k=1, block_of=bo)
    honest = paired_stats(rg, cg, ref_h, list(ref_h), k=1, block_of=bo)
    assert honest.estimate == pytest.approx(2.0, rel=0.01)
    assert st.estimate <= 1.2 * honest.estimate * 1.01 and st.charge_per_call > 0
    for cap in (0.2, 1 / 3):  # the best share to move (cap / (1 + cap) of the work) gains 1 + cap, no more
        best = 5e-3 * cap / (1 + cap)
        for m in (best, moved):
            st_m = paired_stats(rg, [c - m for c in cg], ref_h, [h + m for h in ref_h], k=1, block_of=bo,
                                span_cap=cap)
            assert st_m.estimate <= (1 + cap) * honest.estimate * 1.01
        st_b = paired_stats(rg, [c - best for c in cg], ref_h, [h + best for h in ref_h], k=1, block_of=bo,
                            span_cap=cap)
        assert st_b.estimate == pytest.approx((1 + cap) * honest.estimate, rel=0.01)  # the knob is what binds


def test_paired_stats_on_a_cpu_charges_the_cpu_time_a_loaded_wall_clock_hides():
    """Both cores busy (red team, version 25): the harness's wall time is mostly waiting to be scheduled, the
    reference's by chance longer than the candidate's, so work moved into the candidate's harness read as a
    negative wall-clock excess and was not charged (precompute_while_staging 3-43x against an honest ~4x). Its
    CPU time cannot hide: each block is charged the larger of the two, the CPU time priced at the reference's
    wall/CPU ratio of that block."""
    rg, cg, bo = _pairs(10, 8)  # reference 10 ms, honest candidate 5 ms per span
    moved = 4.5e-3
    ref_wall = [14e-3 + 2e-3 * (b % 3) for b in range(10)]  # 2x its CPU time: a loaded host
    cand_wall = [w - 3e-3 for w in ref_wall]  # the candidate's harness waited less, by chance, than the reference's
    ref_cpu = [7e-3 + 1e-3 * (b % 3) for b in range(10)]
    cheat = [c - moved for c in cg]
    wall_only = paired_stats(rg, cheat, ref_wall, cand_wall, k=1, block_of=bo)
    assert wall_only.charge_per_call == 0.0 and wall_only.estimate > 10  # what 25 did on a loaded CPU host
    cand_cpu = [c + moved / 2 for c in ref_cpu]  # the moved work's CPU time (the wall clock prices it 2x here)
    st = paired_stats(rg, cheat, ref_wall, cand_wall, k=1, block_of=bo, ref_harness_cpu=ref_cpu,
                      cand_harness_cpu=cand_cpu)
    honest = paired_stats(rg, cg, ref_wall, cand_wall, k=1, block_of=bo, ref_harness_cpu=ref_cpu,
                          cand_harness_cpu=list(ref_cpu))
    assert honest.charge_per_call == 0.0 and honest.estimate == pytest.approx(2.0, rel=0.01)
    assert st.charge_per_call > 0 and st.estimate <= 1.2 * honest.estimate * 1.01
    # the price comes from the reference's own clocks and stays within 1-10: a candidate cannot raise or lower it
    idle = paired_stats(rg, cheat, ref_cpu, [c + moved for c in ref_cpu], k=1, block_of=bo,
                        ref_harness_cpu=ref_cpu, cand_harness_cpu=[c + moved for c in ref_cpu])
    assert idle.estimate <= 1.2 * honest.estimate * 1.01
    # Here the reference's own noise (tolerance ~95 ms) is far above the moved work: not called out as such.
    assert not st.work_moved_out


def test_paired_stats_calls_out_work_moved_out_of_the_spans():
    """More harness excess than span, beyond the reference's harness noise: the work ran outside the clock
    (work-outside-timing, fatal). Honest noise, one slow block, a minority of blocks or a third of the work moved
    are not called out (they are charged)."""
    rg, cg, bo = _pairs(10, 8, noise=0.01, seed=4)  # reference 10 ms, candidate 5 ms per span
    ref_h = [1e-3 + 2e-5 * (b % 3) for b in range(10)]
    honest = paired_stats(rg, cg, ref_h, list(ref_h), k=1, block_of=bo)
    assert not honest.work_moved_out and honest.cand_span_per_call == pytest.approx(5e-3, rel=0.02)
    most = paired_stats(rg, [c - 4e-3 for c in cg], ref_h, [h + 4e-3 for h in ref_h], k=1, block_of=bo)
    assert most.work_moved_out and most.excess_per_call > most.cand_span_per_call
    third = paired_stats(rg, [c - 5e-3 / 3 for c in cg], ref_h, [h + 5e-3 / 3 for h in ref_h], k=1, block_of=bo)
    assert not third.work_moved_out and third.charge_per_call > 0
    cand_h = [h + (4e-3 if b < 4 else 0.0) for b, h in enumerate(ref_h)]
    minority = paired_stats(rg, [c - (4e-3 if bo[i] < 4 else 0.0) for i, c in enumerate(cg)], ref_h, cand_h, k=1,
                            block_of=bo)
    assert not minority.work_moved_out and minority.charge_per_call > 0
    slow = list(ref_h)
    slow[4] = 50e-3
    assert not paired_stats(rg, cg, ref_h, slow, k=1, block_of=bo).work_moved_out


def test_paired_stats_a_loaded_machine_does_not_call_a_fast_honest_candidate_out():
    """CI's loaded 2-core runner (the soak): an honest 20x candidate (07_Conv2d_GlobalAvgPool/pooled_taps, 1.2 ms
    spans against a 26-54 ms reference) read a median harness excess above its own span (harness 6-9 ms per call,
    blocks +-5 ms apart, biased to one side) and was scored 0 as work-outside-timing. The excesses' own spread and
    a tenth of the reference's time are floors now; the same candidate with its whole span moved into the
    harness on a quiet machine is still called out."""
    import random as _r

    rng = _r.Random(7)
    rg, cg, bo = _pairs(15, 2, ref=40e-3, cand=1.2e-3, noise=0.05, seed=5)
    ref_h = [7e-3 + rng.uniform(-2e-3, 2e-3) for _ in range(15)]
    cand_h = [h + 1.6e-3 + rng.gauss(0, 4e-3) for h in ref_h]  # +1.6 ms bias, +-4 ms between the two sides
    st = paired_stats(rg, cg, ref_h, cand_h, k=1, block_of=bo)
    assert st.excess_per_call > st.cand_span_per_call  # what the old rule flagged
    assert not st.work_moved_out
    quiet_h = [1.6e-3 + 2e-5 * (b % 3) for b in range(15)]
    moved = paired_stats(rg, [1e-4] * len(cg), quiet_h, [h + 4.1e-3 for h in quiet_h], k=1, block_of=bo)
    assert moved.work_moved_out  # 4.1 ms moved out: above its 0.1 ms span and a tenth of the reference's 40 ms
    assert not paired_stats(rg, [1e-4] * len(cg), quiet_h, [h + 1.1e-3 for h in quiet_h], k=1,
                            block_of=bo).work_moved_out  # 1.1 ms: under a tenth of the reference, charged only


def test_paired_stats_on_a_cpu_the_harness_cpu_time_must_show_the_move_too():
    """The soak on CI (two evaluations at once on 2 cores): 07_PairwiseSqDistance/gemm_expansion, an honest 12x
    with 0.2 ms spans, read its harness 1 ms per call slower than the reference's in every block of one
    evaluation (wall clock: 3-5 ms per call, mostly waiting to be scheduled) and scored 0 as work-outside-timing;
    its CPU time in the harness stayed within +-0.1 ms of the reference's (measured here under the same load).
    Work really moved into the harness costs CPU time there as well: still called out. Without CPU times (GPU
    evaluations) the wall-clock rule stands alone."""
    import random as _r

    rng = _r.Random(11)
    rg, cg, bo = _pairs(8, 3, ref=4e-3, cand=0.25e-3, noise=0.05, seed=6)
    ref_h = [4e-3 + rng.uniform(-0.3e-3, 0.3e-3) for _ in range(8)]
    cand_h = [h + 1.0e-3 + rng.gauss(0, 0.2e-3) for h in ref_h]  # a whole evaluation's side bias, small spread
    ref_cpu = [1.0e-3 + rng.gauss(0, 0.05e-3) for _ in range(8)]
    cand_cpu = [c + rng.gauss(0, 0.05e-3) for c in ref_cpu]
    wall_only = paired_stats(rg, cg, ref_h, cand_h, k=1, block_of=bo)
    assert wall_only.work_moved_out and wall_only.cpu_excess_per_call is None  # what the soak saw
    st = paired_stats(rg, cg, ref_h, cand_h, k=1, block_of=bo, ref_harness_cpu=ref_cpu, cand_harness_cpu=cand_cpu)
    assert not st.work_moved_out and abs(st.cpu_excess_per_call) < 0.1e-3
    assert st.charge_per_call == wall_only.charge_per_call > 0  # the wall-clock charge is unchanged
    assert "harness_cpu_excess_ms" in st.to_dict() and "harness_cpu_excess_ms" not in wall_only.to_dict()
    # a patched harness computing 4 ms of the span while staging: wall and CPU time both grow by it
    moved = paired_stats(rg, [1e-4] * len(cg), ref_h, [h + 4e-3 for h in ref_h], k=1, block_of=bo,
                         ref_harness_cpu=ref_cpu, cand_harness_cpu=[c + 3.8e-3 for c in ref_cpu])
    assert moved.work_moved_out
    # ... but not where its CPU time is below the span it moved from (a tenth of the reference here: 0.4 ms)
    assert not paired_stats(rg, [1e-4] * len(cg), ref_h, [h + 4e-3 for h in ref_h], k=1, block_of=bo,
                            ref_harness_cpu=ref_cpu, cand_harness_cpu=[c + 0.3e-3 for c in ref_cpu]).work_moved_out


def test_paired_stats_one_slow_harness_block_moves_the_median_little():
    rg, cg, bo = _pairs(10, 8, noise=0.01, seed=3)
    ref_h = [1e-3] * 10
    cand_h = list(ref_h)
    cand_h[4] = 50e-3  # one accident (a collection, a page fault storm) in the candidate's harness
    st = paired_stats(rg, cg, ref_h, cand_h, k=1, block_of=bo)
    honest = paired_stats(rg, cg, ref_h, list(ref_h), k=1, block_of=bo)
    assert st.estimate >= honest.estimate * 0.97


# -- wire format --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64])
def test_tensor_bytes_round_trip(dtype):
    x = (torch.randn(3, 5, 2) * 10).to(dtype)
    meta, raw = tensor_to_bytes(x.transpose(0, 2))  # non-contiguous input
    y = bytes_to_tensor(meta, raw)
    assert type(y) is torch.Tensor and y.dtype == dtype and torch.equal(y, x.transpose(0, 2).contiguous())


def test_tensor_bytes_empty_and_scalar():
    for x in (torch.empty(0, 4), torch.tensor(3.5)):
        y = bytes_to_tensor(*tensor_to_bytes(x))
        assert y.shape == x.shape and torch.equal(y, x)


def test_unknown_dtype_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        bytes_to_tensor({"dtype": "object", "shape": [1]}, b"\0" * 8)


def _pipe_pair():
    a_r, b_w = os.pipe()
    b_r, a_w = os.pipe()
    return Channel(a_r, a_w), Channel(b_r, b_w), (a_r, b_w, b_r, a_w)


def test_channel_round_trip_and_no_pickle():
    a, b, fds = _pipe_pair()
    try:
        x, y = torch.randn(4, 4), torch.arange(6).reshape(2, 3)
        a.send({"cmd": "run", "n": 2}, [x, y])
        h, ts = b.recv(timeout=5)
        assert h["cmd"] == "run" and torch.equal(ts[0], x) and torch.equal(ts[1], y)
        # garbage (e.g. a pickle) is rejected as a protocol error, never executed
        import pickle
        import struct

        blob = pickle.dumps(object())
        os.write(fds[3], struct.pack("<I", len(blob)) + blob)
        with pytest.raises(ProtocolError):
            b.recv(timeout=5)
    finally:
        for fd in fds:
            os.close(fd)


def test_channel_rejects_huge_header_and_times_out():
    import struct

    a, b, fds = _pipe_pair()
    try:
        os.write(fds[3], struct.pack("<I", 2**31))
        with pytest.raises(ProtocolError):
            b.recv(timeout=5)
        from kernelrl.evaluation.ipc import Timeout

        with pytest.raises(Timeout):
            b.recv(timeout=0.2)
    finally:
        for fd in fds:
            os.close(fd)


def test_channel_spin_receives_during_the_spin_and_blocks_after_it():
    import threading

    a, b, fds = _pipe_pair()
    try:
        a.send({"cmd": "go", "n": 1})
        t0 = time.perf_counter()
        assert b.recv(timeout=5, spin_s=1.0)[0]["cmd"] == "go"
        assert time.perf_counter() - t0 < 0.5  # returned as soon as the message was there, not after the spin
        late = threading.Timer(0.3, lambda: a.send({"cmd": "late"}))
        late.start()
        assert b.recv(timeout=5, spin_s=0.01)[0]["cmd"] == "late"  # the spin ran out: a blocking wait got it
        assert not b.spin_until_readable(0.01)
    finally:
        late.join()
        for fd in fds:
            os.close(fd)


def test_comparison_in_chunks_finds_one_bad_element_anywhere():
    from kernelrl.evaluation import api

    r = torch.randn(3 * api.COMPARE_CHUNK + 17)
    for j in (0, api.COMPARE_CHUNK + 5, r.numel() - 1):
        c = r.clone()
        c[j] += 1.0
        bad = compare([r], [c], [1], [1])
        assert bad and bad[0] == "wrong-output" and "1/" in bad[1], (j, bad)
    nan = r.clone()
    nan[2 * api.COMPARE_CHUNK + 3] = float("nan")
    assert compare([r], [nan], [1], [1])[0] == "non-finite"
    assert compare([r], [r.clone()], [1], [1]) is None


# -- output comparison ----------------------------------------------------------------------------------------------
def _cmp(r, c):
    return compare([r], [c], [1], [1])


def test_compare_accepts_float_reordering_noise():
    r = torch.randn(256, 256)
    assert _cmp(r, r * (1 + 1e-6)) is None
    assert _cmp(r.double(), r.double() + 1e-12) is None


def test_compare_rejects_wrong_values_shapes_dtypes():
    r = torch.randn(64, 64)
    assert _cmp(r, r + 0.01)[0] == "wrong-output"
    assert _cmp(r, r.t().contiguous())[0] == "wrong-output"
    assert _cmp(r, r[:32])[0] == "shape-mismatch"
    assert _cmp(r, r.double())[0] == "shape-mismatch"
    assert compare([r], [r, r], [1], [2])[0] == "shape-mismatch"
    assert _cmp(torch.arange(5), torch.arange(5) + 1)[0] == "wrong-output"


def test_near_constant_output_fails_on_relative_norm_not_just_atol():
    # every element within atol of the reference, but the output carries no information
    r = torch.softmax(torch.randn(64, 4096) * 0.5, dim=1)  # values ~2.4e-4, spread ~1.3e-4
    c = torch.full_like(r, 1 / 4096)
    assert torch.allclose(c, r, atol=1e-2, rtol=1e-2)  # a KernelBench-style check passes it
    bad = _cmp(r, c)
    assert bad and bad[0] == "wrong-output"


def test_compare_scalar_outputs():
    r = torch.tensor(1.5)
    assert compare([r], [r.clone()], [1], [1]) is None
    flag, msg = compare([r], [torch.tensor(2.5)], [1], [1])
    assert flag == "wrong-output" and "got 2.5" in msg


def test_compare_nan_inf_handling():
    r = torch.tensor([1.0, float("inf"), float("nan"), 2.0])
    assert _cmp(r, r.clone()) is None
    assert _cmp(r, torch.tensor([1.0, float("inf"), 0.0, 2.0]))[0] == "non-finite"
    assert _cmp(torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")]))[0] == "non-finite"
    assert _cmp(r, torch.tensor([1.0, -float("inf"), float("nan"), 2.0]))[0] == "wrong-output"


def test_zero_reference_requires_zero_output():
    r = torch.zeros(100)
    assert _cmp(r, r.clone()) is None
    assert _cmp(r, torch.full((100,), 1e-3))[0] == "wrong-output"


# -- timing digests -------------------------------------------------------------------------------------------------
def _reply(outs_per_call, dseed):
    return {"structure": [len(o) for o in outs_per_call], "metas": [_metas(o) for o in outs_per_call],
            "digests": _digest_round(outs_per_call, dseed)}


def test_digest_accepts_honest_and_catches_small_and_partial_cheats():
    torch.manual_seed(0)
    outs = [[torch.randn(128, 512)] for _ in range(4)]
    ref = _reply(outs, 77)
    assert compare_digests(ref, _reply([[o[0] * (1 + 1e-6)] for o in outs], 77)) is None
    # a stale answer for one call
    stale = [list(o) for o in outs]
    stale[2] = outs[1]
    assert compare_digests(ref, _reply(stale, 77))
    # right everywhere but a 1/7 strided sample... no: wrong on 10% of the elements only
    part = []
    for o in outs:
        x = o[0].clone()
        x.view(-1)[::10] = 0.0
        part.append([x])
    assert compare_digests(ref, _reply(part, 77))
    # a scaled answer with the right sum-of-squares shape is caught by the norm
    assert compare_digests(ref, _reply([[o[0] * 1.01] for o in outs], 77))
    # a subclass, a wrong dtype
    sub = [[o[0].as_subclass(type("Lazy", (torch.Tensor,), {}))] for o in outs]
    assert "plain torch.Tensor" in compare_digests(ref, _reply(sub, 77))
    assert compare_digests(ref, _reply([[o[0].double()] for o in outs], 77))


def test_sampled_digests_compare_only_the_sampled_calls_but_every_calls_metadata():
    outs = [[torch.randn(64)] for _ in range(6)]
    calls = [1, 4]
    hr = {"structure": [1] * 6, "metas": [_metas(o) for o in outs],
          "digests": _digest_round([outs[i] for i in calls], 7)}
    same = dict(hr)
    assert compare_digests(hr, same, calls) is None
    wrong = [list(o) for o in outs]
    wrong[4] = [outs[4][0] + 1.0]
    hc = dict(hr, digests=_digest_round([wrong[i] for i in calls], 7))
    assert "call 4" in compare_digests(hr, hc, calls)
    bad_meta = dict(hr, metas=[_metas(o) for o in outs[:5]] + [_metas([torch.randn(65)])])
    assert compare_digests(hr, bad_meta, calls) is not None  # an unsampled call's shape is still checked
    assert compare_digests(hr, dict(hr, digests=hr["digests"][:1]), calls) == "digests missing"


def test_digest_weights_change_every_round():
    x = [[torch.randn(1000)]]
    a, b = _digest_round(x, 1), _digest_round(x, 2)
    assert a[0][0] == b[0][0] and a[0][1] != b[0][1]  # same norm, different weighted sum


def test_malformed_digest_reply_is_a_mismatch_not_a_crash():
    ref = _reply([[torch.randn(10)]], 3)
    for bad in ({}, {"structure": [1]}, {"structure": [1], "metas": "x", "digests": []},
                {"structure": [1], "metas": [[["float32", [10], True]]], "digests": [["a", "b"]]},
                {"structure": [1], "metas": [[5]], "digests": [[1.0, 2.0]]}):
        assert isinstance(compare_digests(ref, bad), str)


# -- flags and the result contract ----------------------------------------------------------------------------------
def test_flags_are_described_kebab_case_and_fatal_ones_known():
    assert FATAL <= set(FLAGS) and F.CAPPED <= set(FLAGS)
    for name, text in FLAGS.items():
        assert name == name.lower() and " " not in name and "_" not in name and text


def test_eval_result_round_trip_and_success():
    r = EvalResult(executable=True, correct=True, speedup=1.5, flags=["uses-side-stream"],
                   timing={"rounds": 3}, device_type="cpu", custom_kernel_built=None)
    d = r.to_dict()
    assert d["success"] is True and d["evaluator_version"] == EVALUATOR_VERSION
    json.dumps(d)
    back = EvalResult.from_dict(d)
    assert back == r and back.success
    r.flags.append("timing-mismatch")
    assert not r.success


def test_static_checks():
    src = ("import threading, torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ns = torch.cuda.Stream()\n"
           "threading.Thread(target=print).start()\n")
    flags = static_checks(src)
    assert {"uses-side-stream", "changes-global-flags", "spawns-processes"} <= set(flags)
    assert static_checks("import torch\n") == []


# -- sandbox --------------------------------------------------------------------------------------------------------
def test_scrubbed_env_drops_secrets(monkeypatch, tmp_path):
    for k, v in {"KERNELRL_STORE_URL": "postgresql://u:pw@h/db", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
                 "AWS_ACCESS_KEY_ID": "AKIA", "GITHUB_TOKEN": "ghp_x", "OPENAI_API_KEY": "sk-x",
                 "DATABASE_URL": "postgres://x", "HF_TOKEN": "hf_x", "KERNELRL_S3_SECRET_KEY": "x"}.items():
        monkeypatch.setenv(k, v)
    env = scrubbed_env(tmp_path, tmp_path / "cache", threads=1)
    leaked = [k for k in env if k.startswith(("KERNELRL_", "AWS_")) or "TOKEN" in k or "KEY" in k
              or k == "DATABASE_URL"]
    assert not leaked
    assert env["HOME"] == str(tmp_path) and env["OMP_NUM_THREADS"] == "1"
    assert "s3cr3t" not in json.dumps(env) and "pw@" not in json.dumps(env)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor") and env["LOGNAME"]
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # torch.compile compiles in the worker (version 18)


def test_a_candidate_under_a_fresh_uid_can_ask_who_it_is():
    """torch 2.11's inductor calls getpass.getuser() at `import torch._dynamo`, which raises for a uid without a
    passwd entry: every torch.compile candidate failed on the H200 (bench/results/2026-11-28-h200x4-kernelbench,
    call 11). The worker's environment answers it (LOGNAME) and names inductor's cache (TORCHINDUCTOR_CACHE_DIR,
    beside the worker's other compile caches, owned by its uid)."""
    cand = (
        "import getpass, os\nimport torch\nimport torch.nn as nn\n\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.who = getpass.getuser()\n"
        "        d = os.environ['TORCHINDUCTOR_CACHE_DIR']\n"
        "        open(os.path.join(d, 'probe'), 'w').close()  # its own: writable\n\n"
        "    def forward(self, x):\n"
        "        return torch.softmax(x, dim=1)\n")
    r = evaluate(get_task("02_Softmax"), cand, FAST)
    assert r.executable and r.correct, (r.flags, r.error)
    if os.geteuid() == 0:
        assert r.sandbox.get("uid"), r.sandbox  # it did run under a fresh uid


_PROBE = '''
import os, socket, subprocess, json
found = sorted(k for k in os.environ if k.startswith(("KERNELRL_", "AWS_")) or "TOKEN" in k or "SECRET" in k)
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1).close()
    net = True
except OSError:
    net = False
subprocess.Popen(["sleep", "311.25"], start_new_session=True)  # a daemon in a session of its own
if os.fork() == 0:  # and a double-forked one
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "311.25"])
    os._exit(0)
raise RuntimeError("PROBE " + json.dumps({{"env": found, "net": net, "uid": os.getuid()}}))
'''


def test_candidate_worker_sandbox(monkeypatch):
    """A candidate worker sees no secrets and (as root) no network, runs under a fresh uid, and every process it
    starts, however detached, is found and killed."""
    monkeypatch.setenv("KERNELRL_STORE_URL", "postgresql://u:planted@127.0.0.1/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "planted")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    cache = Path(tempfile.mkdtemp(prefix="kernelrl-test-cache-"))
    w = WorkerProcess("cand", device="cpu", cache_dir=cache, mem_limit_mb=4096,
                      module_source=_PROBE.format(port=port))
    try:
        h, _ = w.request({"cmd": "load", "role": "cand", "path": str(w.module_path), "device": "cpu", "seed": 1,
                          "train_mode": True, "init_inputs": [], "template": []}, timeout=120)
        assert not h["ok"] and "PROBE" in h["error"], h
        probe = json.loads(h["error"].split("PROBE ", 1)[1].splitlines()[0].rstrip("'\""))
        assert probe["env"] == []
        if os.geteuid() == 0:
            assert w.network_isolated and probe["net"] is False
            assert w.uid is not None and probe["uid"] == w.uid and w.uid not in (0, 65534)
            time.sleep(0.3)
            assert len(pids_of_uid(w.uid)) >= 3  # the worker and both daemons, found by uid
    finally:
        leftovers = w.close()
        srv.close()
    if os.geteuid() == 0:
        assert len(leftovers) >= 2
        assert pids_of_uid(w.uid) == []
    time.sleep(0.2)
    import psutil

    alive = [p for p in psutil.process_iter(["cmdline"]) if "311.25" in " ".join(p.info["cmdline"] or [])]
    assert not alive, alive


# -- whole evaluations ----------------------------------------------------------------------------------------------
_ZERO_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        y = self.lin(x)
        return torch.clamp(y, min=0.0) * 0.0  # always zeros whatever the input (like KernelBench L2 #80/#83)

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return [256]
'''

_ZERO_CAND = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x.new_zeros(x.shape[0], self.n)
'''


def test_task_audit_flags_input_independent_reference_and_caps_the_score():
    res = evaluate(_ZERO_TASK, _ZERO_CAND, FAST)  # a task given as source text
    assert res.correct and "task-input-independent" in res.flags, res.to_dict()
    assert 0 < res.speedup <= 1.0


_STATEFUL_CAND = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.clamp(self.lin(x), min=0.0) * 0.0
'''


def test_weights_are_copied_from_reference_and_result_contract():
    res = evaluate(_ZERO_TASK, _STATEFUL_CAND, FAST)
    d = res.to_dict()
    for key in ("executable", "correct", "speedup", "flags", "error", "timing", "evaluator_version", "device_type",
                "custom_kernel_built", "compile_error", "wall_s"):
        assert key in d
    assert d["executable"] and d["correct"] and d["device_type"] == "cpu"
    for key in ("rounds", "bucket_means", "estimate", "ci_low", "ci_high", "score_raw", "ref_median_ms",
                    "cand_median_ms", "harness_charge_ms", "stop", "phases_s"):
        assert key in d["timing"]
    assert d["timing"]["audits"] >= 1


def _cli(argv, capsys):
    from kernelrl.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_a_candidate_that_does_not_compile_fails_before_any_worker_starts(monkeypatch):
    """Truncated or malformed generations are common in RL batches: compiling the source (running none of it) in
    the parent tells build-failed at once, in the worker's words, without the ~5 s of worker start-up."""
    from kernelrl.evaluation import api

    def no_workers(*a, **kw):
        raise AssertionError("a session was started for a source that does not compile")

    monkeypatch.setattr(api, "Session", no_workers)
    task = get_task("02_Softmax")
    res = evaluate(task, "import torch\nclass ModelNew(torch.nn.Module:\n    pass\n", FAST)
    assert res.flags == ["build-failed"] and not res.executable and not res.correct and res.speedup == 0.0
    assert res.error.startswith("SyntaxError: ") and "line 2" in res.error and res.compile_error == res.error
    res = evaluate(task, "x = 1\n\x00\n", FAST)
    assert res.flags == ["build-failed"] and res.error.startswith("SyntaxError: ")


def test_cli_eval_json_and_user_errors(tmp_path, capsys):
    task = tmp_path / "task.py"
    task.write_text(_ZERO_TASK)
    cand = tmp_path / "cand.py"
    cand.write_text("this is not python\n")
    rc, out, err = _cli(["eval", str(task), str(cand), "--device", "cpu", "--budget-s", "0.2",
                         "--correctness-trials", "2", "--json"], capsys)
    assert rc == 0, (out, err)
    d = json.loads(out)  # exactly one JSON object on stdout
    assert d["executable"] is False and d["speedup"] == 0 and "build-failed" in d["flags"]
    assert d["evaluator_version"] == EVALUATOR_VERSION
    rc, out, err = _cli(["eval", str(task), str(tmp_path / "missing.py"), "--json"], capsys)
    assert rc == 2 and "missing.py" in err and len(err.strip().splitlines()) == 1
    rc, out, err = _cli(["eval", "no_such_task_anywhere", str(cand), "--json"], capsys)
    assert rc == 2 and "no_such_task_anywhere" in err


_FALLBACK_CAND = '''
import torch
import torch.nn as nn

try:  # a custom kernel that does not build, hidden behind a fallback (as 6/6 released CUDA-L1 kernels did)
    from torch.utils.cpp_extension import load_inline
    # (fails before any compiler runs, to keep the test fast: the build directory cannot exist)
    ext = load_inline(name="broken_ext_kernelrl_test", cpp_sources="int f() { return 0; }", functions=["f"],
                      build_directory="/proc/no-such-dir-kernelrl")
except Exception:
    ext = None


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.clamp(self.lin(x), min=0.0) * 0.0
'''


def test_failed_extension_build_behind_a_fallback_is_recorded():
    res = evaluate(_ZERO_TASK, _FALLBACK_CAND, FAST)
    assert res.correct and "extension-build-failed" in res.flags, res.to_dict()
    assert res.custom_kernel_built is False and res.compile_error


def test_integer_outputs_allow_one_flip_per_thousand_elements():
    """argmax over a softmax of near-equal logits is decided by the reference's rounding: an exact rewrite (argmax
    over the logits) flipped 3.4e-5 of the rows of tiny-input trials. One element in a thousand may differ; a
    short output gets no slack, and two flips in 1,024 are wrong."""
    ref = torch.arange(1024) % 1000
    one, two = ref.clone(), ref.clone()
    one[7] = 3
    two[7], two[9] = 3, 4
    assert compare([ref], [one], [1], [1]) is None
    assert compare([ref], [two], [1], [1])[0] == "wrong-output"
    short = torch.arange(999)
    flipped = short.clone()
    flipped[0] = 5
    assert compare([short], [flipped], [1], [1])[0] == "wrong-output"
    assert compare([ref > 500], [one > 500], [1], [1]) is None  # bool outputs alike


def test_store_fatal_flags_mirror_the_evaluator():
    """kernelrl.store.sampling keeps a torch-free copy of the fatal flags: it must not drift."""
    from kernelrl.evaluation.flags import FATAL
    from kernelrl.store.sampling import FATAL_FLAGS

    assert FATAL_FLAGS == FATAL


@pytest.mark.timeout(300)
def test_identical_candidate_is_not_dragged_down_by_its_first_blocks():
    """A candidate's first blocks after its correctness checks ran 10-50x slower on a CPU VM (first touch of the
    memory its outputs get); one such counted block made an identical candidate's lower bound 0.22. Warm-up blocks
    continue until both sides' spans settle."""
    task = get_task("09_Swish")
    cand = task.source.replace("class Model(", "class ModelNew(").replace("super(Model,", "super(ModelNew,")
    # 2 s: ~16 counted blocks on this VM (2026-11-26; 1 s gave ~20 when this test was written, 8 now). With 8
    # one stray slow span (a page-fault burst, a candidate span 10-30x long) moved the lower bound to 0.4-0.6 in
    # most runs, the estimate staying at 0.9-1.0: the Wilcoxon interval of so few blocks is not what this test is
    # about.
    cfg = EvalConfig(device="cpu", budget_s=2.0, correctness_trials=3, reverify=False, spread_threshold=10.0)
    # The better of two evaluations: a stray slow block from the rest of a busy test run can still pull one lower
    # bound down; the cold-block bug pulled every evaluation to 0.21-0.28.
    runs = [evaluate(task.source, cand, cfg, keep_rounds=True) for _ in range(2)]
    r = max(runs, key=lambda x: x.speedup)
    assert r.executable and r.correct, (r.flags, r.error)
    assert r.timing["warmup_blocks"] >= 1
    # The bound at 0.5, not 0.8: on a host with ~12% CPU steal (CI, 2026-11-29) the better of two lower bounds was
    # 0.68 with its estimate at 0.97; the bug's 0.21-0.28 stays far below it. The estimate must sit near 1.
    assert 0.5 <= r.speedup <= 1.25 and 0.8 <= r.timing["estimate"] <= 1.25, [x.timing for x in runs]
    # the host probe (diagnostic): one per counted block, summarised
    raw = r.timing["rounds_raw"]
    assert len(raw["host_probe"]) == len(raw["harness_ref"]) == r.timing["blocks"] - r.timing["warmup_blocks"]
    # the harness phases' CPU time from the kernel's clock (diagnostic), per counted block, both sides
    assert len(raw["harness_cpu_ref"]) == len(raw["harness_cpu_cand"]) == len(raw["harness_ref"])
    assert min(raw["harness_cpu_ref"] + raw["harness_cpu_cand"]) > 0 and r.timing["ref_harness_cpu_ms"] > 0
    assert r.timing["host_probe"]["py_us"] > 0 and r.timing["host_probe"]["py_spread"] >= 0


def test_device_clock_pairs_charge_what_the_parent_clock_saw_beyond_the_reported_device_time():
    """clock='device' (CUDA): the candidate's reply is untrusted. Its device time is checked pair by pair against
    the parent's clock (span - spin - device time, against the reference's round trip): a lie, work on another
    stream or a garbage value ends up charged, an honest candidate is not, and a lie keeps at most the allowance."""
    from kernelrl.evaluation.api import device_times

    def pair(dev_c, wall_c, spin_c=10e-3, extra_ref=0.0, info=None, cpu_c=None):
        info = info if info is not None else {"spin": [], "starved_ref": 0, "starved_cand": 0, "outside_ref": [],
                                              "outside_cand": [], "charged": [], "spin_short": 0, "cpu_ref": [],
                                              "cpu_cand": [], "cpu_charged": []}
        q = {"ref": [], "cand": []}
        wall = {"ref": 10e-3 + 2e-3 + 50e-6 + extra_ref, "cand": wall_c}
        replies = {"ref": {"dev_s": 2e-3, "spin_done_s": 10e-3, "queued_s": 1e-3, "parent_cpu_s": 1.5e-3},
                   "cand": {"dev_s": dev_c, "spin_done_s": spin_c, "queued_s": 0.5e-3}}
        if cpu_c is not None:
            replies["cand"]["parent_cpu_s"] = cpu_c
        return device_times(wall, replies, 10e-3, info, q, 0.2), info

    info = None
    for i in range(20):  # the reference's round trip: 50 us with a few us of noise
        t, info = pair(1e-3, 10e-3 + 1e-3 + 52e-6, extra_ref=(i % 3) * 2e-6, info=info)
    assert t["ref"] == pytest.approx(2e-3) and t["cand"] == pytest.approx(1e-3)  # honest: nothing charged
    real = 10e-3 + 1e-3 + 50e-6  # a candidate whose calls take 1 ms on the GPU, by the parent's clock
    lie, _ = pair(1e-6, real, info=info)  # a patched timer: "1 us"
    assert lie["cand"] >= 1e-3 * 0.99
    side, _ = pair(0.2e-3, real, info=info)  # 0.8 ms on a stream the events do not cover
    assert 1e-3 - 25e-6 <= side["cand"] <= 1e-3 * 1.01  # the round trip's noise (20 us) forgiven, no more
    most, _ = pair(0.9e-3, real, info=info)  # a small lie: at most the allowance (0.2 of what it reports) forgiven
    assert most["cand"] >= 1e-3 / 1.2
    for junk in ("nan", -1.0, "x", float("inf")):
        g, _ = pair(junk, real, info=info)
        assert g["cand"] == pytest.approx(real)  # the whole span: its claim is no number
    big_spin, _ = pair(1e-6, real, spin_c=1.0, info=info)  # claims the spin took 1 s: counted as the reference's
    assert big_spin["cand"] >= 1e-3 * 0.99  # 1 us + 0.2 us forgiven, the rest charged
    # Skips the spin and claims 1 us: its span (1 ms of work and the round trip) is shorter than the spin alone.
    shorts = info["spin_short"]
    skip, _ = pair(1e-6, 1e-3 + 50e-6, info=info)
    assert skip["cand"] >= 1e-3 * 0.99 and info["spin_short"] == shorts + 1
    # The hole that keeps this clock off rewards: shortening the spin by 0.8 ms and claiming 0.2 ms of its 1 ms
    # gives a span exactly as long as an honest one; nothing on the parent's side can tell
    # (tests/redteam/cuda/shorten_spin.py shows it on the GPU).
    part, _ = pair(0.2e-3, real - 0.8e-3, info=info)
    assert part["cand"] == pytest.approx(0.2e-3) and info["spin_short"] == shorts + 1


def test_device_clock_charges_host_work_done_while_the_spin_held_the_gpu():
    """clock='device': CPU time is on no GPU clock; the parent reads each worker's CPU time in its span from the
    kernel. A candidate may use as much as the reference did in the pair, or as its own device time; beyond that
    (plus 10% and the reference's noise) it is charged: CPU work hidden in the spin, or heavier dispatch."""
    from kernelrl.evaluation.api import device_times

    info = {"spin": [], "starved_ref": 0, "starved_cand": 0, "outside_ref": [], "outside_cand": [], "charged": [],
            "spin_short": 0, "cpu_ref": [], "cpu_cand": [], "cpu_charged": []}

    def pair(cpu_c, dev_c=1e-3):
        wall = {"ref": 10e-3 + 2e-3 + 50e-6, "cand": 10e-3 + dev_c + 50e-6}
        replies = {"ref": {"dev_s": 2e-3, "spin_done_s": 10e-3, "queued_s": 1e-3, "parent_cpu_s": 1.5e-3},
                   "cand": {"dev_s": dev_c, "spin_done_s": 10e-3, "queued_s": 0.5e-3, "parent_cpu_s": cpu_c}}
        return device_times(wall, replies, 10e-3, info, {"ref": [], "cand": []}, 0.2)["cand"]

    for _ in range(10):
        assert pair(0.8e-3) == pytest.approx(1e-3)  # lighter host work than the reference: nothing charged
    assert pair(1.6e-3) == pytest.approx(1e-3)  # within 10% of the reference's
    burn = pair(6e-3)  # 6 ms of CPU in the span: computed on the host while the spin held the GPU
    assert burn == pytest.approx(1e-3 + 6e-3 - 1.5e-3 - 0.15e-3 - 2e-5, rel=1e-6)
    assert pair(3e-3, dev_c=4e-3) == pytest.approx(4e-3)  # GPU-bound: its dispatch hides behind its own kernels
    assert pair("junk") == pytest.approx(1e-3)  # no CPU reading (not a float): no charge from it
    assert len(info["cpu_cand"]) == 13


def test_paired_totals_drop_bursts_and_charge_systematic_harness_excess():
    """The device clock's statistics: ratio of totals over blocks. An honest candidate's harness noise is not
    charged; work moved out in every block is charged but for 2 standard errors of the mean excess; the blocks
    with the largest excess are left out (a burst buys nothing); moving work between spans changes nothing."""
    import random

    from kernelrl.evaluation.stats import paired_totals

    rng = random.Random(3)
    nb, k = 16, 100
    ref_go = [10e-3 * (1 + rng.gauss(0, 0.002)) for _ in range(2 * nb)]
    cand_go = [2e-3 * (1 + rng.gauss(0, 0.002)) for _ in range(2 * nb)]
    block_of = [i // 2 for i in range(2 * nb)]
    ref_h = [8e-3 + rng.gauss(0, 0.4e-3) for _ in range(nb)]
    cand_h = [8e-3 + rng.gauss(0, 0.4e-3) for _ in range(nb)]
    honest = paired_totals(ref_go, cand_go, ref_h, cand_h, k, block_of)
    assert honest.ci_low <= 5.0 <= honest.ci_high and abs(honest.estimate / 5 - 1) < 0.01
    assert honest.charge_per_call == 0.0 and honest.dropped_blocks == 1  # 16 blocks: the top one left out
    assert honest.rel_halfwidth < 0.01
    for moved_ms in (0.5, 1.0, 1.5, 3.0):  # below, around and above the reference's 3 sigma (~1.7 ms)
        w = moved_ms * 1e-3
        moved = paired_totals(ref_go, [c - w / 2 for c in cand_go], ref_h, [h + w / 2 for h in cand_h], k, block_of)
        # w/2 of each span's work done in the harness instead
        se2 = 2 * moved.excess_se_per_call * k  # what may be forgiven: 2 standard errors per span
        assert moved.estimate <= 10e-3 / (2e-3 - se2) * 1.01, (moved_ms, moved)
    burst_h, burst_go = list(cand_h), list(cand_go)
    for b in range(0, nb, 3):  # 1.9 ms of each span moved out in a third of the blocks
        burst_h[b] += 2e-3
        burst_go[2 * b] -= 1.9e-3
        burst_go[2 * b + 1] -= 1.9e-3
    third = paired_totals(ref_go, burst_go, ref_h, burst_h, k, block_of)
    assert third.estimate <= 10e-3 / (2e-3 - 2 * third.excess_se_per_call * k) * 1.01, third
    burst_h, burst_go = list(cand_h), list(cand_go)
    burst_h[5] += 4e-3  # 2 ms per span moved out in block 5 only
    burst_go[10] -= 1.9e-3
    burst_go[11] -= 1.9e-3
    burst = paired_totals(ref_go, burst_go, ref_h, burst_h, k, block_of)
    assert abs(burst.estimate / honest.estimate - 1) < 0.01  # block 5 is the one left out
    shifted = list(cand_go)  # half of span 1's work done in span 0 of each block: the totals do not move
    for b in range(nb):
        shifted[2 * b] += 1e-3
        shifted[2 * b + 1] -= 1e-3
    assert paired_totals(ref_go, shifted, ref_h, cand_h, k, block_of).estimate == pytest.approx(honest.estimate)


def test_worker_cpu_seconds_come_from_the_kernel_and_count_every_thread():
    """clock='device' charges host work by each worker's CPU time, which the parent reads from the kernel's
    per-process CPU clock: it counts the worker's threads (here one burning 0.4 s beside the main thread during
    the import), reads across uids (the candidate's fresh uid when root), and does not move while the worker idles
    or is frozen."""
    import tempfile

    from kernelrl.evaluation.sandbox import WorkerProcess

    src = ("import threading, time\n"
           "def burn():\n    t = time.process_time()\n    while time.process_time() - t < 0.4: pass\n"
           "th = threading.Thread(target=burn); th.start(); th.join()\n")
    w = WorkerProcess("cand", device="cpu", cache_dir=Path(tempfile.mkdtemp(prefix="kernelrl-test-cache-")),
                      mem_limit_mb=4096, module_source=src)
    try:
        c0 = w.cpu_seconds()
        h, _ = w.request({"cmd": "load", "role": "cand", "path": str(w.module_path), "device": "cpu", "seed": 1,
                          "train_mode": True, "init_inputs": [], "template": []}, timeout=120)
        c1 = w.cpu_seconds()
        assert c1 - c0 >= 0.38, (c0, c1, h)
        w.freeze()
        time.sleep(0.3)
        w.thaw()
        time.sleep(0.2)  # idle in a blocking read
        assert w.cpu_seconds() - c1 < 0.05
    finally:
        w.close()
    assert w.cpu_seconds() == 0.0  # gone: nothing to read


def test_device_clock_on_cpu_is_the_parent_clock():
    """clock='device' applies on CUDA only: on a CPU the evaluation runs the parent's clock (no 'clock' key)."""
    import dataclasses

    r = evaluate(_ZERO_TASK, _ZERO_CAND, dataclasses.replace(FAST, clock="device"))
    assert r.success and r.speedup > 0 and "clock" not in r.timing


def test_reverify_rejects_a_drop_beyond_tolerance_and_keeps_the_lower_of_a_rise():
    """One-sided: a second measurement below the first by more than the tolerance is a mismatch (a faked or lucky
    first one); above it is accepted, since the lower of the two is kept (an honest 12x on the CPU VM: 10.86 then
    12.63 was zeroed under the two-sided rule)."""
    from kernelrl.evaluation.stats import reverify_agrees

    assert reverify_agrees(10.86, 12.63, True, 0.10)  # a rise: kept as 10.86
    assert reverify_agrees(10.0, 9.01, True, 0.10)
    assert not reverify_agrees(10.0, 8.99, True, 0.10)  # a drop beyond 10%
    assert not reverify_agrees(13.62, 11.41, True, 0.10)
    assert not reverify_agrees(10.0, 10.0, False, 0.10) and not reverify_agrees(0.0, 5.0, True, 0.10)


def test_reverify_verdict_allows_for_the_intervals_and_the_reference_and_never_raises_a_score():
    """Issue 32: a drop beyond the tolerance is not a mismatch when the two measurements' own intervals overlap,
    or when the reference itself ran faster by enough to explain it; what is kept is the lower of the two either
    way, a mismatch included (version 20: flagged reverify-disagreed, 0 before), and 0 when the re-measurement
    failed."""
    from kernelrl.evaluation.stats import reverify_verdict

    # the CPU softmax case: first 3.80, re-measured 3.03 (-20%)
    v = reverify_verdict(3.80, 3.03, True, 0.10, first_interval=(3.80, 4.30), second_interval=(3.03, 3.90))
    assert v.agree and v.rule == "intervals-overlap" and v.kept == 3.03
    assert "kept 3.03x (the re-measurement, the lower)" in v.why and "[3.8, 4.3]" in v.why
    v = reverify_verdict(3.80, 3.03, True, 0.10, first_interval=(3.80, 4.30), second_interval=(3.03, 3.40))
    assert not v.agree and v.rule == "mismatch" and v.kept == 3.03 and v.flag == "reverify-disagreed"
    assert v.why.endswith("kept 3.03x (the re-measurement, the lower; flagged reverify-disagreed)"), v.why
    # the reference 25% faster the second time: a 20% drop is the machine's, not the candidate's
    v = reverify_verdict(3.80, 3.03, True, 0.10, first_interval=(3.80, 3.9), second_interval=(3.03, 3.1),
                         ref_ms=(2.0, 1.5))
    assert v.agree and v.rule == "reference-moved" and v.kept == 3.03 and "25% faster" in v.why
    v = reverify_verdict(3.80, 3.03, True, 0.10, first_interval=(3.80, 3.9), second_interval=(3.03, 3.1),
                         ref_ms=(2.0, 2.1))  # the reference steady (slower, even): the candidate dropped
    assert not v.agree and "the reference steady" in v.why
    # a cached-first-run cheat: 20x then 1.1x, intervals far apart: it keeps the fresh 1.1, never the 20; and a
    # re-measurement that failed scores 0; the order of two honest draws no longer decides (L1 40_LayerNorm)
    assert reverify_verdict(20.0, 1.1, True, 0.10, first_interval=(20, 21), second_interval=(1.1, 1.2)).kept == 1.1
    v = reverify_verdict(3.8, 3.8, False, 0.10, first_interval=(3.8, 4), second_interval=(3.8, 4))
    assert not v.agree and v.rule == "failed" and v.kept == 0.0 and v.flag == "reverify-mismatch"
    one = reverify_verdict(25.66, 18.33, True, 0.10, first_interval=(25.6, 25.7), second_interval=(18.3, 18.4))
    other = reverify_verdict(18.33, 25.66, True, 0.10, first_interval=(18.3, 18.4), second_interval=(25.6, 25.7))
    assert one.kept == other.kept == 18.33 and one.flag == "reverify-disagreed" and other.flag is None
    # a rise keeps the first; an agreeing verdict never keeps more than either measurement
    v = reverify_verdict(10.86, 12.63, True, 0.10)
    assert v.agree and v.rule == "tolerance" and v.kept == 10.86 and "kept 10.86x (the first, the lower)" in v.why
    # the score is the interval's low end rounded toward one; the interval is shown rounded outward, so the score
    # never reads outside it (c18 on the H200 printed "first 3.01x [3.02, 3.03]")
    v = reverify_verdict(3.01, 3.01, True, 0.10, first_interval=(3.01813, 3.02527),
                         second_interval=(3.01738, 3.02474))
    assert v.why.startswith("first 3.01x [3.01, 3.03], re-measured 3.01x [3.01, 3.03]"), v.why
    for first, second in [(3.8, 3.03), (5.0, 4.6), (2.0, 9.0)]:
        v = reverify_verdict(first, second, True, 0.10, first_interval=(first, first * 2),
                             second_interval=(second, second * 2), ref_ms=(1.0, 0.5))
        assert v.agree and v.kept <= min(first, second)


def test_uses_jit_names_the_compilers_that_run_at_the_first_call():
    from kernelrl.evaluation.static import uses_jit

    assert uses_jit("self.f = torch.compile(self.f)") and uses_jit("@triton.jit\ndef k(x_ptr): pass")
    assert uses_jit("m = torch.jit.script(m)") and uses_jit("import torch._dynamo")
    assert not uses_jit("return torch.softmax(x, dim=-1)") and not uses_jit("torch.compiled_with_cxx11_abi()")


_FIRST_CALL_SLEEPER = '''import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """{note}: its first call takes 7 s (a compile would), the others are the reference's work."""

    def __init__(self):
        super().__init__()
        self.first = True

    def forward(self, x):
        if self.first:
            self.first = False
            time.sleep(7)
        return torch.softmax(x, dim=-1)
'''


@pytest.mark.slow  # ~40 s: two evaluations with a 7 s first call, and a real torch.compile on the CPU
def test_a_first_call_that_compiles_gets_the_compile_allowance_and_is_reported_apart():
    """A source that names a JIT compiler (torch.compile, Triton, TorchScript) gets compile_timeout_s for its first
    forward call, reported as timing.first_call_s; any other source keeps the run limit (here 5 s), so a slow or
    looping forward still fails fast. The paper's torch.compile baseline (reports/reference_baselines.py) is then
    scorable: on the CPU VM inductor's compile of 09_Swish overran the 14.6 s run limit before."""
    from kernelrl.reports.reference_baselines import baseline_source

    cfg = dataclasses.replace(FAST, timeout_factor=50.0)
    plain = evaluate(get_task("02_Softmax"), _FIRST_CALL_SLEEPER.format(note="no compiler named"), cfg)
    assert "timeout" in plain.flags and not plain.executable, (plain.flags, plain.error)
    named = evaluate(get_task("02_Softmax"), _FIRST_CALL_SLEEPER.format(note="as torch.compile would"), cfg)
    assert named.success and named.timing["first_call_s"] >= 7, (named.flags, named.error)
    task = get_task("09_Swish")
    compiled = evaluate(task, baseline_source(task, "baseline:compile"), FAST)
    assert compiled.executable and compiled.correct, (compiled.flags, compiled.error)
    assert compiled.timing["first_call_s"] > 0 and "leftover-processes" not in compiled.flags
    assert compiled.timing["compiler_preimport_s"] > 0  # its worker imported dynamo and inductor in its warm-up


def test_each_worker_draws_the_same_correctness_sets_from_a_seed_and_variant():
    """Correctness sets are drawn in each worker (worker_inputs.draw_inputs), the candidate's from the task's source
    (task_module): the same seed and variant give the same tensors in both, another seed other tensors, and on CPU
    the values the reference drew and shipped before version 13 (same generators, same order)."""
    from kernelrl.evaluation.worker_inputs import VARIANTS, VariedRandom, draw_inputs, task_module

    task = get_task("builtin/L1/02_Softmax")
    ref, cand = task_module(task.source), task_module(task.source)
    cpu = torch.device("cpu")
    for variant in VARIANTS:
        a, b = draw_inputs(ref, 7, variant, cpu), draw_inputs(cand, 7, variant, cpu)
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)), variant
        assert not torch.equal(a[0], draw_inputs(ref, 8, variant, cpu)[0]), variant
        torch.manual_seed(7)  # the pre-13 draw: the reference's, on the host
        with VariedRandom(variant, torch.Generator().manual_seed(8)):
            old = ref.get_inputs()
        assert torch.equal(old[0], a[0]), variant


def test_variants_work_in_place_and_give_the_values_of_the_old_expressions(monkeypatch):
    """Correctness' random-source variants transform the fresh draw in place (KernelBench's 16 GiB inputs: out of
    place, ``heavy`` held four tensors of that size at once), with values bit for bit those of the expressions they
    replaced (OldRandom: the code before, its own draws going through the wrapped sources as they did), for every
    variant and real dtype; a draw that asked for gradients still does."""
    from kernelrl.evaluation.worker_inputs import VARIANTS, VariedRandom

    class OldRandom(VariedRandom):
        def normal(self, x):
            v = self.variant
            if v == "scaled":
                return x * self.scale + self.shift
            if v == "uniform":
                return torch.rand(x.shape, generator=self.g, dtype=x.dtype).to(x.device) * 4 - 2
            if v == "heavy":
                u = torch.rand(x.shape, generator=self.g, dtype=x.dtype).clamp_min(0.05).to(x.device)
                return x / u.sqrt()
            return x * 1e-3 if v == "small" else x

        def unit(self, x):
            v = self.variant
            if v == "scaled":
                return x ** (1.0 / max(self.scale, 0.2))
            if v == "heavy":
                return x ** 4
            return x * 1e-3 if v == "small" else x

    def draw(cls, variant, name, dtype):
        with cls(variant, torch.Generator().manual_seed(3)):
            torch.manual_seed(5)
            return getattr(torch, name)(64, 33, dtype=dtype)

    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for variant in VARIANTS:
            for name in ("randn", "rand"):
                got, want = draw(VariedRandom, variant, name, dtype), draw(OldRandom, variant, name, dtype)
                assert got.dtype == dtype and torch.equal(got, want), (dtype, variant, name)
                if (variant, name) not in (("normal", "randn"), ("normal", "rand"), ("uniform", "rand")):
                    assert not torch.equal(got, draw(VariedRandom, "normal", name, dtype)), (variant, name)
    # in place: the tensor get_inputs receives is the draw itself (its memory), not a second one of its size
    drawn: list[int] = []
    for name in ("randn", "rand"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _f=real, **k: drawn.append((t := _f(*a, **k)).data_ptr()) or t)
    for variant in ("scaled", "heavy", "small"):
        for name in ("randn", "rand"):
            drawn.clear()
            with VariedRandom(variant, torch.Generator().manual_seed(3)):
                t = getattr(torch, name)(64, 33)
            assert t.data_ptr() == drawn[0], (variant, name)
    monkeypatch.undo()
    with VariedRandom("heavy", torch.Generator().manual_seed(3)):
        x = torch.randn(8, 8, requires_grad=True)
        y = torch.rand(8, 8, requires_grad=True)
    assert x.requires_grad and x.is_leaf and y.requires_grad and y.is_leaf
    with VariedRandom("uniform", torch.Generator().manual_seed(3)):
        z = torch.randn(8, 8, requires_grad=True)
    assert z.requires_grad and z.is_leaf


@pytest.mark.gpu
def test_a_variant_draw_on_the_gpu_holds_at_most_two_tensors_of_its_size():
    """On the device, where KernelBench's 16 GiB inputs are drawn: a 1 GiB draw under each variant peaks at two
    tensors of its size (the draw and a uniform, ``heavy`` and ``uniform``), one for the others; out of place,
    ``heavy`` peaked at four (the draw, the uniform, its square root, the quotient)."""
    from kernelrl.evaluation.worker_inputs import VARIANTS, VariedRandom

    size = 1 << 30
    for variant in VARIANTS:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.device("cuda"), VariedRandom(variant, torch.Generator(device="cuda").manual_seed(3)):
            x = torch.randn(size // 4)
        peak = torch.cuda.max_memory_allocated() - base
        assert peak <= (2 if variant in ("heavy", "uniform") else 1) * size + (1 << 20), (variant, peak / size)
        del x


SCALAR_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, s: float):
        return A * s


def get_inputs():
    return [torch.rand(64, 32), 3.14]


def get_init_inputs():
    return []
"""


def test_a_scalar_input_reaches_forward_as_get_inputs_returns_it(tmp_path):
    """A task whose get_inputs returns a Python float (KernelBench L1 5, ``s = 3.14``) passes it as a float in
    correctness as in the timed calls. Before version 16 correctness turned it into a 0-d tensor: a candidate whose
    kernel takes a float failed as a runtime error, and a torch.compile candidate recompiled in the timed phase."""
    from kernelrl.evaluation.worker_inputs import draw_inputs, task_module
    from kernelrl.tasks.loader import load_task_file

    drawn = draw_inputs(task_module(SCALAR_TASK), 3, "scaled", torch.device("cpu"))
    assert isinstance(drawn[0], torch.Tensor) and drawn[1] == 3.14 and type(drawn[1]) is float
    (tmp_path / "task.py").write_text(SCALAR_TASK)
    strict = SCALAR_TASK.replace("class Model(", "class ModelNew(").replace(
        "        return A * s", "        if type(s) is not float:\n"
        "            raise TypeError(f'this kernel takes s as a float, got {type(s).__name__}')\n"
        "        return A * s")
    res = evaluate(load_task_file(tmp_path / "task.py"), strict, FAST)
    assert res.success and res.correct, (res.flags, res.error)


def test_huge_outputs_get_fewer_correctness_sets_and_say_so(monkeypatch):
    """Outputs that would ship more than SHIP_BUDGET_BYTES through the pipes get fewer correctness sets, never
    fewer than MIN_TRIALS, with an information flag and the number run; small outputs keep every set."""
    from kernelrl.evaluation import correctness

    assert correctness.trials_for(20, 4096) == 20
    assert correctness.trials_for(20, 6_400_000_000) == correctness.MIN_TRIALS == 3  # KernelBench's big softmax
    assert correctness.trials_for(20, 2 * 1024**3) == 8  # 32 GB / (2 x 2 GB)
    monkeypatch.setattr(correctness, "SHIP_BUDGET_BYTES", 2 * 4 * 1024 * 2048 * 5)  # 5 sets of Softmax's output
    honest = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
    res = evaluate(get_task("builtin/L1/02_Softmax"), honest, EvalConfig(device="cpu", budget_s=0.2,
                                                                          correctness_trials=9))
    assert res.correct and "correctness-trials-reduced" in res.flags, (res.flags, res.error)
    assert res.timing["correctness_trials_run"] == 5


def test_the_candidates_correctness_limit_covers_the_references_whole_request(monkeypatch):
    """The candidate's limit for a batch of correctness sets adds DRAW_FACTOR x the reference's whole request
    (drawing, forward, shipping the outputs back), not its draw alone: KernelBench's softmax (6.4 GB outputs)
    timed out on the H100 when the shipping was left out. The reference's request is slowed here by 1 s, as big
    outputs slow it; the run limit is pinned so only the allowance differs."""
    from kernelrl.evaluation import correctness
    from kernelrl.evaluation.session import Session

    seen = []
    real = Session.draw_run

    def spy(self, worker, seeds, variants, timeout, ship=True, **kw):
        t0 = time.perf_counter()
        out = real(self, worker, seeds, variants, timeout, ship, **kw)
        if worker is self.ref:
            time.sleep(1.0)
        seen.append(("ref" if worker is self.ref else "cand", timeout, time.perf_counter() - t0))
        return (time.perf_counter() - t0, *out[1:])

    monkeypatch.setattr(Session, "draw_run", spy)
    monkeypatch.setattr(correctness, "run_timeout", lambda s, cal, n: 0.5)
    honest = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.softmax(x, dim=1)\n")
    res = evaluate(get_task("builtin/L1/02_Softmax"), honest, dataclasses.replace(FAST, correctness_trials=2))
    assert res.correct, (res.flags, res.error)
    pairs = [(seen[i - 1], c) for i, c in enumerate(seen) if c[0] == "cand"]  # each batch: the reference's, then
    assert pairs and all(r[0] == "ref" for r, _ in pairs), seen  # the candidate's request (calibration: ref only)
    for (_, _, ref_s), (_, cand_limit, _) in pairs:
        assert cand_limit >= 0.5 + correctness.DRAW_FACTOR * ref_s - 1e-6, seen
