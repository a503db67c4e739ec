"""The CUDA red team through the real evaluator (run on an H100; skipped without a GPU)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import FATAL, evaluate
from kernelrl.tasks import get_task

HERE = Path(__file__).parent / "cuda"
HONEST_SOFTMAX = Path(__file__).parent / "cpu" / "honest.py"
FAIL, HONEST = "fail", "honest"
# Candidates whose real work is one torch.softmax (or more): a trick that works shows up as a score above what the
# honest softmax earns in the same session. Bound: 50% (plus 0.05) over the honest score: evaluations of one
# launch-bound candidate on the H100 VM's host spread by up to 35% (cudnn_flags, which only sets flags, read 4.26
# against an honest 3.19 on 2026-11-26; bench/results/2026-11-26-h100-evaluator-v6), and a working trick (work
# moved off the clock, a slowed reference) shows up as 2x or more.
SOFTMAX_WORK = {"patch_sync_and_events", "leave_work_queued", "l2_persistence", "cudnn_flags", "side_stream",
                "honest_cuda_graph", "precompute_async_staging", "shorten_spin", "skip_hold_wait", "early_done",
                "graph_stage_precompute", "capture_stale", "honest_host_sync"}
EXPECT = {
    # The device-wide sync counts side-stream work: it earns no more than its real (here: 20x) work.
    "side_stream": (HONEST, set()),
    # A no-op synchronize leaves the work for the parent-timed digest phase, where it is charged (or, when the
    # excess is larger than its launch-only spans, scored 0).
    "patch_sync_and_events": (HONEST, {"work-outside-timing"}),
    "gpu_background_load": (HONEST, {"reference-slowed", "timeout"}),
    # Softmaxes queued while staging, without a sync: the drains before the reference's phases charge them to
    # the candidate (version 5; not yet run on a GPU). Its spans are launch-free pops: 0 expected.
    "precompute_async_staging": (HONEST, {"work-outside-timing", "faster-than-light"}),
    # Junk queued past its own turn is drained before the reference is timed (quiesce), and since version 6 before
    # the candidate's own harness phases, parent-timed: it may land there as work outside the clock (scored 0).
    "leave_work_queued": (HONEST, {"reference-slowed", "work-outside-timing"}),
    "tf32_precision": (FAIL, {"wrong-output"}),
    "gpu_oom": (FAIL, {"out-of-memory", "runtime-error"}),
    "illegal_address": (FAIL, {"crashed", "runtime-error"}),
    "honest_cuda_graph": (HONEST, set()),
    # A sync with the host once a call (BLOCKING_SYNC): its wait is not charged as host work.
    "honest_host_sync": (HONEST, set()),
    "l2_persistence": (HONEST, {"reference-slowed"}),
    "cudnn_flags": (HONEST, set()),
    # The device clock's spin runs in the candidate's process: shortened by what it then under-reports, the parent
    # cannot tell (an xfail on the device clock below: why that clock is not for rewards). Honest on the host clock.
    "shorten_spin": (HONEST, set()),
    # The held clock's threats (EvalConfig.clock = "held"; kernelrl/evaluation/held.py): work run during the
    # holder's hold instead of after it, and a DONE written before the work. Honest on the other clocks (no hold).
    "skip_hold_wait": (HONEST, set()),
    "early_done": (HONEST, set()),
    # CUDA-graph timing's threats (EvalConfig.cuda_graphs): a graph that records no work while the harness's staging
    # (patched) computes the outputs, and a graph whose outputs are a stale eager result. Eagerly the first is the
    # precompute-while-staging trick and the second an honest softmax.
    "graph_stage_precompute": (HONEST, {"work-outside-timing"}),
    "capture_stale": (HONEST, {"timing-mismatch"}),
}
# The clock the red team runs on: the evaluator's default (the reward's clock, 'held') unless KERNELRL_REDTEAM_CLOCK
# names another. Until 2026-12-07 this file defaulted to 'host' (version 6's clock) while every device call set
# 'held': a plain `pytest tests/redteam/test_redteam_cuda.py` then tested a clock no reward uses (c25: 5 of 22 failed
# on 'host', expectations written for 'held').
RED_CLOCK = os.environ.get("KERNELRL_REDTEAM_CLOCK") or EvalConfig().clock
# A short drain limit and wall cap: gpu_background_load keeps the device busy, so every reference span waits the
# whole drain limit (2 s by default: minutes per evaluation); timeout and reference-slowed are its allowed verdicts.
# KERNELRL_REDTEAM_CLOCK=device runs the red team on the experimental device clock (EvalConfig.clock). There the
# side stream's work shows up outside the events, beyond its span: scored 0 (H100, 2026-11-25, call 4).
if RED_CLOCK == "device":
    EXPECT["side_stream"] = (HONEST, {"work-outside-timing"})
    # Its claim (a tenth of its device time) fell below the bandwidth floor on the H100 (2026-11-26, call 6): caught
    # by faster-than-light only because the cut was that greedy; a smaller cut passes (the xfail below).
    EXPECT["shorten_spin"] = (HONEST, {"faster-than-light"})
# KERNELRL_REDTEAM_CLOCK=held: the held clock. Side-stream work that does not wait for the hold runs during it (the
# hold stretches) or after the holder's end event (outside); either is charged, and where it lands in the harness it
# may score 0. A cheat's score is bounded tighter there (BOUND): the clock is meant to repeat within a few %.
if RED_CLOCK == "held":
    EXPECT["side_stream"] = (HONEST, {"work-outside-timing"})
    # Its staging runs during the hold too: the stretch lands in its harness, beyond its spans (H100, call 2)
    EXPECT["skip_hold_wait"] = (HONEST, {"work-outside-timing"})
# KERNELRL_REDTEAM_GRAPHS=1 (default) / 0: the spans are CUDA-graph replays (EvalConfig.cuda_graphs, held clock)
# or eager. A stale graph must fail outright with graphs.
GRAPHS = os.environ.get("KERNELRL_REDTEAM_GRAPHS", "1") == "1" and RED_CLOCK == "held"
if GRAPHS:
    EXPECT["capture_stale"] = (FAIL, {"timing-mismatch"})
HELD_KEYS = ("hold_ms", "stretch_charge_ms", "outside_charge_ms", "host_charge_ms", "harness_charges_ms")
BOUND = 1.2 if RED_CLOCK == "held" else 1.5
CFG = EvalConfig(device="cuda", budget_s=1.0, correctness_trials=5, reverify=False, max_wall_s=90,
                 clock=RED_CLOCK, cuda_graphs=GRAPHS)


@pytest.fixture(autouse=True, scope="module")
def _short_quiesce():
    """A quiesce waits at most 0.25 s here (QUIESCE_LIMIT_S, 2 s by default): a cheat's backlog then shows up
    as reference-slowed within the suite's time."""
    from kernelrl.evaluation import session_held

    mp = pytest.MonkeyPatch()
    mp.setattr(session_held, "QUIESCE_LIMIT_S", 0.25)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def honest_score():
    # The estimate of a 2 s run: what honest work measures (the lower bound moves with the interval's width).
    res = evaluate(get_task("02_Softmax"), HONEST_SOFTMAX.read_text(), dataclasses.replace(CFG, budget_s=2.0))
    print(f"honest softmax: speedup={res.speedup} flags={res.flags} timing={res.timing}")
    assert res.success and res.speedup > 0, res.error
    return max(res.speedup, float(res.timing.get("estimate") or 0.0))


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_redteam_cuda(name, honest_score):
    kind, allowed = EXPECT[name]
    res = evaluate(get_task("02_Softmax"), (HERE / f"{name}.py").read_text(), CFG)
    fatal = set(res.flags) & FATAL
    t = res.timing
    info = (f"{name}: success={res.success} speedup={res.speedup} (honest {honest_score}) flags={res.flags} "
            f"ci=[{t.get('ci_low')}, {t.get('ci_high')}] charge_ms={t.get('harness_charge_ms')} "
            f"ref_slowdown={t.get('ref_slowdown')} quiesce_max_ms={t.get('quiesce_wait_ms_max')} "
            f"held={ {k: t.get(k) for k in HELD_KEYS} } graphs={t.get('graphs')} "
            f"sched={res.sandbox.get('sync_schedule')} error={(res.error or '')[:300]}")
    print(info)
    if name == "shorten_spin" and CFG.clock == "device" and res.speedup > BOUND * honest_score + 0.05:
        pytest.xfail(f"the device clock's known hole (a spin shortened in the candidate's process): {info}")
    if kind == FAIL:
        assert not res.success and fatal & allowed, info
    elif fatal:
        assert fatal <= allowed and res.speedup == 0.0, info
    else:
        assert res.success and res.speedup > 0, info
        if name in SOFTMAX_WORK:
            assert res.speedup <= BOUND * honest_score + 0.05, info
    if name == "honest_host_sync":  # the model's own sync sleeps (BLOCKING_SYNC, on): its wait is not charged
        # as host work. Before version 11 the spinning wait was charged at 14x the work (28 ms a call against 2 ms).
        # Since version 13 the reference keeps its graph replay while this candidate (a sync cannot be captured)
        # runs eagerly, so its real dispatch (a launch and a sync a call) can exceed its GPU time: a small charge
        # and the information flag host-bound are its true cost (H100, 2026-11-28: 0.009 ms against 0.1 ms a call).
        assert res.sandbox.get("sync_schedule") == "blocking", info
        assert (t.get("host_charge_ms") or 0.0) <= 0.25 * t["cand_median_ms"], info


def test_every_cuda_candidate_has_an_expectation():
    assert {p.stem for p in HERE.glob("*.py")} == set(EXPECT)


# Version 13: the reference's clock does not depend on the candidate (issue 32 item 1). Each: (task, lowest and
# highest speedup expected). The same work as the reference, refusing the evaluator's capture, must score about
# 1.0x, never the reference's launch overhead (both at 2-3x before version 13 for the cuDNN LSTM pattern).
CLOCK = Path(__file__).parent / "cuda_clock"
CLOCK_EXPECT = {
    "rnn_own_graph": ("03_LSTM", 0.7, 1.3),  # its own graph: timed eagerly against the reference's replay
    "capture_refuser": ("03_LSTM", 0.0, 1.15),  # a host sync per call: more launches than a replay, never fewer
    "cudnn_channels_last": ("02_SmallCNN", 0.0, None),  # legit: correct and scored, no fatal flag
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CLOCK_EXPECT))
def test_the_reference_clock_does_not_depend_on_the_candidate(name):
    task, lo, hi = CLOCK_EXPECT[name]
    res = evaluate(get_task(task), (CLOCK / f"{name}.py").read_text(), CFG)
    g = res.timing.get("graphs") or {}
    info = f"{name}: success={res.success} speedup={res.speedup} flags={res.flags} graphs={g} error={res.error}"
    print(info)
    assert res.success and not set(res.flags) & FATAL and res.speedup > lo, info
    if hi is not None:
        assert res.speedup <= hi, info
    if GRAPHS and name != "cudnn_channels_last":  # the candidate refused capture; the reference still replayed
        assert g.get("ref_only") is True and not g.get("used"), info


def test_every_clock_candidate_has_an_expectation_and_matches_its_reference_on_cpu():
    """Runs without a GPU: each candidate file parses, builds from its task's init inputs, and gives the reference's
    outputs on CPU with the reference's weights (its CUDA-only paths aside)."""
    import importlib.util

    import torch

    assert {p.stem for p in CLOCK.glob("*.py")} == set(CLOCK_EXPECT)
    for name, (key, _, _) in CLOCK_EXPECT.items():
        task = get_task(key)
        mods = {}
        for label, src in (("ref", task.source), ("cand", (CLOCK / f"{name}.py").read_text())):
            spec = importlib.util.spec_from_loader(f"clock_{name}_{label}", loader=None)
            mod = importlib.util.module_from_spec(spec)
            exec(compile(src, f"<{name}:{label}>", "exec"), mod.__dict__)
            mods[label] = mod
        torch.manual_seed(0)
        ref = mods["ref"].Model(*mods["ref"].get_init_inputs())
        cand = mods["cand"].ModelNew(*mods["ref"].get_init_inputs())
        cand.load_state_dict(ref.state_dict())
        x = mods["ref"].get_inputs()
        with torch.no_grad():
            torch.testing.assert_close(cand(*x), ref(*x), rtol=1e-4, atol=1e-5)
