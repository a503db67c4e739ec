"""The CPU red team, run through the real evaluator: every trick is scored 0 with a flag, or earns no more
than honest work. One task (level 1 softmax, honest speedup ~4x on one CPU thread) keeps it fast."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import psutil
import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import FATAL, evaluate
from kernelrl.tasks import get_task

HERE = Path(__file__).parent / "cpu"
HONEST_BOUND = 30.0  # honest torch.softmax vs the written-out reference is 4-12x on one CPU thread; a trick that
# skips the work would be far above

FAIL, HONEST = "fail", "honest"
# Caught: scored 0 with one of its flags, or, where the machine's harness noise hid it (two evaluations at once on
# 2 cores did, now and then), still charged for the moved work and held to CAUGHT_BOUND x honest.
CAUGHT = "caught"
CAUGHT_BOUND = 2.0
NOISE_FLAGS = {"reference-slowed"}
# Tricks that still compute the real answer somewhere the parent times: they must not score markedly above the
# honest candidate measured in the same session (CPU timing here is noisy: 50% slack).
# precompute_a_third is charged but not held to the bound: on this CPU VM its lower bounds reached 1.37x honest
# (estimates 1.2-1.5x: its in-span calls ran cheaper than honest ones, 1.35 vs 1.8 ms), and the whole-move
# variant once read 1.6x on CI where it read at most 1.22x here.
CHARGED = {"precompute_a_third"}
BOUNDED = {"patch_worker_timer", "patch_clocks", "background_thread"}
# The candidate saw no network (as root, where the sandbox can isolate it): checked on the honest candidate and on
# the one that probes the network (a noise flag zeroes a score without touching isolation, so only ran-and-right is
# required of them here).
ISOLATION_CHECKED = {"honest", "probes_network_and_secrets"}
EXPECT: dict[str, tuple[str, set[str]]] = {
    "honest": (HONEST, set()),
    "cache_by_address": (FAIL, {"wrong-output", "timing-mismatch"}),
    # Keeps every output alive: each block's new outputs need fresh memory, which the harness's prefault
    # (staging, CPU) touches first, page by page; that outweighs its spans and can read as work outside the
    # clock (0), which for a candidate that leaks its outputs is no false reward.
    "cache_by_values": (HONEST, {"work-outside-timing"}),
    "stale_after_first_calls": (FAIL, {"timing-mismatch", "wrong-output"}),
    "patch_clocks": (HONEST, set()),
    "patch_worker_timer": (HONEST, set()),
    "patch_library_ops": (FAIL, {"wrong-output", "runtime-error"}),
    "slow_the_reference": (HONEST, {"reference-slowed"}),
    "steal_reference_output": (FAIL, {"wrong-output"}),
    "forged_stdout": (FAIL, {"crashed"}),
    "shrunk_hyperparams": (FAIL, {"wrong-output"}),
    "near_constant": (FAIL, {"wrong-output"}),
    "global_flags": (HONEST, set()),
    # Its busy thread holds the GIL between the harness's Python steps: the candidate's own harness phases slow
    # down more than its spans (torch releases the GIL), which can read as work outside the clock: 0.
    "background_thread": (HONEST, {"reference-slowed", "work-outside-timing"}),
    "uninitialised_output": (FAIL, {"wrong-output", "non-finite"}),
    "lazy_subclass": (FAIL, {"output-subclass"}),
    "patch_harness_inputs": (FAIL, {"timing-mismatch", "wrong-output"}),
    # Its own correctness draw patched to one fixed set with a cached answer: the reference drew other sets.
    "patch_drawn_inputs": (FAIL, {"wrong-output"}),
    # Work moved out of the timed span into the parent-timed harness phases: all of it scores 0 (billed at its
    # cache-hot cost there it once measured 1.6x honest on CI); a third of it is charged to the candidate
    # (CHARGED below: the charge must be there; the info flag needs more blocks than this short budget gives).
    "precompute_while_staging": (CAUGHT, {"work-outside-timing"}),
    "defer_to_digest": (CAUGHT, {"work-outside-timing"}),
    "precompute_a_third": (HONEST, {"work-outside-timing"}),
    "infinite_loop": (FAIL, {"timeout"}),
    "segfault": (FAIL, {"crashed"}),
    "host_oom": (FAIL, {"out-of-memory", "runtime-error", "crashed"}),
    "exit_midway": (FAIL, {"crashed"}),
    "leftover_children": (HONEST, {"leftover-processes"}),
    "raises": (FAIL, {"runtime-error"}),
    # the worker once died converting it ("crashed", the error a traceback's tail); now a runtime error naming it
    "unreadable_output": (FAIL, {"runtime-error"}),
    "syntax_error": (FAIL, {"build-failed"}),
    "missing_modelnew": (FAIL, {"build-failed"}),
    "wrong_shape": (FAIL, {"shape-mismatch"}),
    "probes_network_and_secrets": (HONEST, set()),
}

# timeout_factor 50 (not the paper's 1000): the infinite loop is cut after max(5 s, 50 x reference) instead of
# 1000 x a ~10 ms reference, which keeps the suite fast; the rule is the same.
CFG = EvalConfig(device="cpu", budget_s=0.6, correctness_trials=4, reverify=False, max_wall_s=90,
                 timeout_factor=50.0, spread_threshold=10.0, memory_limit_mb=4096)


@pytest.fixture(scope="module")
def task():
    return get_task("02_Softmax")


@pytest.fixture(scope="module")
def honest_score(task):
    """What honest work measures here: the estimate (not the conservative lower bound, which moves with the
    interval's width: 8 blocks of a 0.6 s budget once put it at 0.81 for a ~3.5x estimate) of a 2 s run."""
    for _ in range(3):  # a noise flag alone (reference-slowed on the loaded 2-core VM) measures nothing: again
        res = evaluate(task, (HERE / "honest.py").read_text(), dataclasses.replace(CFG, budget_s=2.0))
        if res.success or not set(res.flags) & FATAL <= NOISE_FLAGS:
            break
    assert res.success, f"{res.flags} {res.error}"
    return max(res.speedup, float(res.timing.get("estimate") or 0.0))


def test_every_candidate_has_an_expectation():
    assert {p.stem for p in HERE.glob("*.py")} == set(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_redteam_candidate(name, task, honest_score, monkeypatch):
    # Secrets in the evaluating process must never reach the candidate.
    monkeypatch.setenv("KERNELRL_STORE_URL", "postgresql+psycopg2://u:planted-secret@127.0.0.1:5432/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "planted-secret")
    kind, allowed = EXPECT[name]
    t0 = time.monotonic()
    res = evaluate(task, (HERE / f"{name}.py").read_text(), CFG)
    wall = time.monotonic() - t0
    fatal = set(res.flags) & FATAL
    info = f"{name}: success={res.success} speedup={res.speedup} flags={res.flags} error={(res.error or '')[:300]}"
    if kind == FAIL:
        assert not res.success and res.speedup == 0.0, info
        assert fatal & allowed, info
    elif kind == CAUGHT:
        print(info)  # which of the two it was, for the log
        if fatal:
            # caught by its own flag, or zeroed by a noise flag alone (reference-slowed fired on an idle 2-core VM
            # in 1 of 15 runs of precompute_while_staging, 2026-11-26): a score of 0 either way, nothing gained
            assert (fatal & allowed or fatal <= NOISE_FLAGS) and fatal <= allowed | NOISE_FLAGS, info
            assert res.speedup == 0.0, info
        else:
            assert res.timing["harness_charge_ms"] > 0, f"{info} timing={res.timing}"
            assert res.speedup <= CAUGHT_BOUND * honest_score + 0.3, f"{info} (honest: {honest_score})"
    else:
        if fatal:
            # On a loaded 2-core machine the two interference checks can also fire for honest code: a score of
            # 0 is a false alarm, never a faked speedup, which is what this suite is about.
            assert fatal <= allowed | NOISE_FLAGS and res.speedup == 0.0, info
        else:
            assert res.success and 0 < res.speedup <= HONEST_BOUND, info
            if name in BOUNDED:
                assert res.speedup <= 1.5 * honest_score + 0.3, f"{info} (honest: {honest_score})"
            if name in CHARGED:
                assert res.timing["harness_charge_ms"] > 0, f"{info} timing={res.timing}"
        for f in allowed - FATAL - NOISE_FLAGS:
            assert f in res.flags, info
    if name in ISOLATION_CHECKED:  # ran and was right, in a sandbox without network (where isolation is possible)
        assert res.executable and res.correct, info
        if os.geteuid() == 0:
            assert res.sandbox.get("network_isolated") is True, f"{info} sandbox={res.sandbox}"
    assert wall < 60, f"{name} took {wall:.0f}s"


def test_work_moved_into_the_harness_gains_nothing_on_a_loaded_host(task, honest_score):
    """Both cores kept busy by two spinning processes beside the evaluation: the harness's wall time is then
    mostly waiting to be scheduled, and at version 25 precompute_while_staging read a negative wall-clock excess
    and scored 3-43x against an honest ~4x (4 of 6 evaluations above this bound). Its CPU time is charged too
    (stats._cpu_charges): caught (0) or held to the bound, every time."""
    import subprocess
    import sys

    src = (HERE / "precompute_while_staging.py").read_text()
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        for _ in range(2):
            res = evaluate(task, src, CFG)
            info = f"success={res.success} speedup={res.speedup} flags={res.flags} timing={res.timing}"
            assert res.speedup == 0.0 or res.speedup <= CAUGHT_BOUND * honest_score + 0.3, \
                f"{info} (honest: {honest_score})"
    finally:
        for b in burners:
            b.kill()
            b.wait()


def test_no_process_survives_the_red_team():
    time.sleep(0.5)
    alive = [p for p in psutil.process_iter(["cmdline"]) if "307.5" in " ".join(p.info["cmdline"] or [])]
    assert not alive, alive
