"""A candidate source's compile cache is held by one worker at a time (kernelrl.evaluation.sandbox.lock_cache).

Found on the H100 (ninth session): a pre-build and an evaluation of the same source at once broke each other: as
root each worker gets the cache under its own fresh uid, and a build killed mid-way left torch's build lock, on
which every later load of that source waited until its timeout."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation.precompile import candidate_cache_dir, precompile
from kernelrl.evaluation.sandbox import WorkerProcess, lock_cache


def _cand(cache: Path, wait: float) -> WorkerProcess:
    return WorkerProcess("cand", device="cpu", cache_dir=cache, mem_limit_mb=None, lock_timeout=wait)


def test_a_second_worker_of_one_source_waits_for_the_first_and_then_owns_the_cache(tmp_path):
    cache = tmp_path / "cand" / "abc123"
    first = _cand(cache, 5)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="in use by another worker"):
            _cand(cache, 0.3)
        assert 0.3 <= time.monotonic() - t0 < 5
        other = _cand(tmp_path / "cand" / "def456", 0.3)  # another source's cache is not held up
        other.close()
        threading.Timer(0.5, first.close).start()  # the first evaluation ends: the second goes on
        t0 = time.monotonic()
        second = _cand(cache, 10)
        try:
            assert time.monotonic() - t0 >= 0.4
            if second.uid is not None:  # as root: the cache is the second worker's uid's now
                assert os.stat(cache).st_uid == second.uid
        finally:
            second.close()
    finally:
        first.close()
    # the lock file is the evaluator's, beside the cache: not in what the candidate's uid is given
    assert (tmp_path / "cand" / ".abc123.lock").exists() and not list(cache.glob("*.lock"))


def test_a_build_lock_left_by_a_killed_build_is_removed_once_the_cache_is_held(tmp_path):
    cache = tmp_path / "cand" / "abc123"
    stale = cache / "torch_extensions" / "my_ext" / "lock"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    fd = lock_cache(cache, 1)
    try:
        assert not stale.exists() and stale.parent.exists()
        with pytest.raises(TimeoutError):
            lock_cache(cache, 0.1)
    finally:
        os.close(fd)
    os.close(lock_cache(cache, 0.1))  # released with its fd


def test_precompile_of_a_source_being_evaluated_reports_instead_of_raising(tmp_path):
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), compile_timeout_s=0.3)
    source = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    fd = lock_cache(candidate_cache_dir(source, cfg), 1)
    try:
        r = precompile(source, cfg)
    finally:
        os.close(fd)
    assert r["ok"] is False and "in use by another worker" in r["error"]


def test_an_evaluation_whose_source_cache_stays_held_ends_as_a_timeout_not_a_hang(tmp_path):
    from kernelrl.evaluation import evaluate
    from kernelrl.tasks import get_task

    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), compile_timeout_s=0.5, budget_s=0.2, reverify=False,
                     correctness_trials=2)
    source = (Path(__file__).parent / "redteam" / "cpu" / "honest.py").read_text()
    fd = lock_cache(candidate_cache_dir(source, cfg), 1)
    try:
        t0 = time.monotonic()
        res = evaluate(get_task("02_Softmax"), source, cfg)
    finally:
        os.close(fd)
    assert not res.success and "timeout" in res.flags and "in use by another worker" in res.error
    assert time.monotonic() - t0 < 30
    res = evaluate(get_task("02_Softmax"), source, dataclasses.replace(cfg, compile_timeout_s=600.0))
    assert res.success, res.error  # released: the same source evaluates


def test_a_re_measurement_takes_the_cache_after_the_first_measurements_workers_let_it_go(tmp_path):
    """EvalConfig.reverify runs a second evaluation of the same source: after the first one's workers are closed
    (before, its candidate worker waited for the cache the first still held, and the re-measurement timed out).

    What is asserted is the re-measurement's own outcome (timing.reverify: its flags, error and wall time), not how
    its score compares: on CI's loaded 2-core runner a 0.2 s CPU budget's scores wander 0.6x-3.5x, and the
    reference-slowed verdict (fatal above 1x) failed one re-measurement there (flags unstable-timing and
    reference-slowed, no error), scored 0 and flagged reverify-mismatch. The interference check is off, as in the
    other CPU tests that evaluate on that runner: it is not what this test is about."""
    from kernelrl.evaluation import evaluate
    from kernelrl.tasks import get_task

    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), compile_timeout_s=20, budget_s=0.2, correctness_trials=2,
                     reverify=True, reverify_above=0.0, reverify_tolerance=0.95, interference_factor=1e9)
    source = (Path(__file__).parent / "redteam" / "cpu" / "honest.py").read_text()
    res = evaluate(get_task("02_Softmax"), source, cfg)
    rv = res.timing.get("reverify")
    assert rv is not None, (res.flags, res.error)  # the first measurement succeeded and was re-measured
    # The re-measurement's candidate worker took the cache (one that stays held ends as a timeout after
    # compile_timeout_s, "in use by another worker"), built and ran the candidate, and its verdict succeeded.
    assert "timeout" not in rv["flags"] and "in use by another worker" not in (rv["error"] or ""), rv["why"]
    assert rv["success"] and rv["rule"] != "failed", rv["why"]
    assert rv["wall_s"] < cfg.compile_timeout_s, rv
    assert res.success and "reverify-mismatch" not in res.flags, (res.flags, rv["why"])
