"""The held clock's parent-side arithmetic and plumbing (EvalConfig.clock = "held"; kernelrl/evaluation/held.py).

What needs a GPU (the holder's chain, the semaphores in the CUDA streams) runs in the CUDA red team and in
bench/held_clock_check.py on the device; here: what each pair of held phases charges the candidate, the hold's
plan, the semaphore pages, and that a CPU evaluation keeps the parent's clock."""

from __future__ import annotations

import dataclasses
import os
import stat
import struct

import pytest

from kernelrl.config.recipes import ConfigError, validate_values
from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate
from kernelrl.evaluation.held import (CHAIN_MAX, CHAIN_MIN, SEM_DONE, HeldBook, Phase, Semaphores, held_info,
                                      hold_plan, pair_times)

NOMINAL = 6e-3  # the hold both sides of a pair get
REF = dict(wall=NOMINAL + 2e-3 + 60e-6, hold=NOMINAL, work=2e-3, cpu=1.0e-3, nominal=NOMINAL)


def _book(n: int = 24) -> HeldBook:
    """A book whose reference has been seen for ``n`` pairs: holds within 0.1%, round trips 60 +- 3 us, CPU
    1 ms +- 20 us."""
    book = HeldBook()
    for i in range(n):
        r = Phase(**{**REF, "hold": NOMINAL * (1 + 1e-3 * (i % 3 - 1)), "wall": REF["wall"] + 3e-6 * (i % 3 - 1),
                     "cpu": 1e-3 + 2e-5 * (i % 3 - 1)})
        pair_times("go", r, Phase(**{**REF, "work": 1e-3, "wall": REF["wall"] - 1e-3}), book, 0.2)
    return book


def _cand(**kw) -> Phase:
    base = dict(wall=NOMINAL + 1e-3 + 60e-6, hold=NOMINAL, work=1e-3, cpu=0.6e-3, nominal=NOMINAL)
    return Phase(**{**base, **kw})


def test_an_honest_pair_is_its_gpu_times_and_nothing_is_charged():
    book = _book()
    tr, tc, ch = pair_times("go", Phase(**REF), _cand(), book, 0.2)
    assert tr == pytest.approx(2e-3) and tc == pytest.approx(1e-3)
    assert ch == {"stretch": 0.0, "outside": 0.0, "cpu": 0.0}


def test_work_run_during_the_hold_stretches_it_and_is_charged():
    """A worker that skips its wait runs in the gaps of the holder's chain: the hold takes longer by what ran
    there, and that is charged (the GPU time after the hold is then only the rest of its work)."""
    book = _book()
    _, tc, ch = pair_times("go", Phase(**REF), _cand(hold=NOMINAL + 0.8e-3, work=0.2e-3, wall=NOMINAL + 1.06e-3),
                           book, 0.2)
    forgiven = (3 * ch_sd(book) + 2e-3) * NOMINAL + 5e-6  # the hold's jitter (SM clock) and no more
    assert forgiven < 50e-6 and ch["stretch"] == pytest.approx(0.8e-3 - forgiven, rel=0.01)
    assert tc == pytest.approx(1e-3 - forgiven, rel=0.01)


def ch_sd(book: HeldBook) -> float:
    from kernelrl.evaluation.held import _robust_sd

    return _robust_sd(book.hold_rel["go"][-32:])


def test_done_written_early_leaves_work_after_the_holders_end_which_the_parent_clock_charges():
    book = _book()
    # claims 10 us of GPU time; the parent's clock around the phase still holds the whole 1 ms
    _, tc, ch = pair_times("go", Phase(**REF), _cand(work=10e-6), book, 0.2)
    assert ch["outside"] > 0.9e-3 and tc >= 1e-3 - 25e-6
    # a lie of 0.1 ms keeps at most the round trip's noise (>= 20 us), never the allowance's 20% of its work
    _, tc, _ = pair_times("go", Phase(**REF), _cand(work=0.9e-3), book, 0.2)
    assert tc >= 1e-3 - 25e-6


def test_host_work_while_the_hold_keeps_the_gpu_is_charged_beyond_the_reference_and_its_own_gpu_time():
    book = _book()
    # dispatch hidden behind its own 1 ms of kernels: free
    _, tc, ch = pair_times("go", Phase(**REF), _cand(cpu=1.05e-3), book, 0.2)
    assert ch["cpu"] == 0.0 and tc == pytest.approx(1e-3)
    # 3 ms of CPU (a result computed on the host while the hold kept the GPU): the excess is charged
    _, tc, ch = pair_times("go", Phase(**REF), _cand(cpu=3e-3), book, 0.2)
    assert ch["cpu"] == pytest.approx(3e-3 - 1e-3 - 0.1e-3 - 3 * 1.4826 * 2e-5 - 2e-5, rel=0.05)
    assert tc == pytest.approx(1e-3 + ch["cpu"]) and tc > 2.7e-3  # ~ max(CPU, GPU): what it costs for real
    # in a harness phase the reference's CPU time is the allowance (no GPU time of its own to hide behind)
    _, _, ch = pair_times("stage", Phase(**REF), _cand(cpu=2e-3, work=2e-3, wall=REF["wall"]), book, 0.2)
    assert ch["cpu"] > 0.8e-3


def test_harness_phases_are_booked_apart_from_spans():
    book = _book()
    n_go = len(book.charged["stretch"])
    pair_times("digest", Phase(**REF), _cand(hold=NOMINAL * 1.5, work=2e-3, wall=REF["wall"]), book, 0.2)
    assert len(book.charged["stretch"]) == n_go and book.charged_harness["stretch"] > 2e-3
    info = held_info(book, 10)
    assert info["clock"] == "held" and info["harness_charges_ms"]["stretch"] > 2
    assert info["held_work_ms_ref"] == pytest.approx(2.0) and info["stretch_charge_ms"] == 0.0


def test_hold_plan_outlasts_the_queueing_in_a_chain_of_short_spins():
    rate = 1 / 1.98e9  # seconds per cycle (an H100's SM clock)
    cycles, chain, secs = hold_plan(2e-3, 0.3e-3, 3.0, rate)
    assert secs == pytest.approx(3 * 2e-3 + 0.3e-3 + 2e-4, rel=1e-3) and CHAIN_MIN <= chain <= CHAIN_MAX
    assert 20e-6 <= secs / chain <= 30e-6  # short pieces: another context's time slice shows as a gap
    _, chain, secs = hold_plan(0.0, 0.0, 3.0, rate)
    assert chain == CHAIN_MIN and secs >= 2e-4
    _, chain, _ = hold_plan(1.0, 0.0, 3.0, rate)
    assert chain == CHAIN_MAX


def test_semaphore_pages_are_private_and_the_parent_can_release_a_holder(tmp_path):
    sems = Semaphores(None, root=str(tmp_path))
    try:
        for path in sems.paths.values():
            st = os.stat(path)
            assert st.st_size == 4096 and stat.S_IMODE(st.st_mode) == 0o600
        sems.done("cand", 7)
        with open(sems.paths["cand"], "rb") as f:
            assert struct.unpack_from("<I", f.read(), SEM_DONE)[0] == 7
        with open(sems.paths["ref"], "rb") as f:
            assert struct.unpack_from("<I", f.read(), SEM_DONE)[0] == 0
    finally:
        sems.close()
    assert not any(os.path.exists(p) for p in sems.paths.values())


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the candidate's page to its uid needs root")
def test_the_candidates_page_belongs_to_its_uid(tmp_path):
    sems = Semaphores(3_123_457, root=str(tmp_path))
    try:
        assert os.stat(sems.paths["cand"]).st_uid == 3_123_457 and os.stat(sems.paths["ref"]).st_uid == 0
    finally:
        sems.close()


def test_held_is_a_valid_clock_and_others_are_not():
    validate_values(EvalConfig(clock="held"), "eval")
    with pytest.raises(ConfigError, match="host, device or held"):
        validate_values(EvalConfig(clock="wall"), "eval")


_TASK = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2.0
def get_inputs():
    return [torch.randn(256, 256)]
def get_init_inputs():
    return []
'''
_CAND = _TASK.replace("class Model(", "class ModelNew(")


def test_held_clock_on_cpu_is_the_parent_clock():
    """clock='held' applies on CUDA only: on a CPU the evaluation runs the parent's clock (no 'clock' key)."""
    cfg = dataclasses.replace(EvalConfig(device="cpu"), clock="held", budget_s=0.5, correctness_trials=2,
                              reverify=False, min_rounds=4)
    r = evaluate(_TASK, _CAND, cfg)
    assert r.success and r.speedup > 0 and "clock" not in r.timing, r.error
