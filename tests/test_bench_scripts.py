"""The GPU session's bench scripts, smoke-run on a CPU: they must work before device time is spent on them
(bench/gpu_session.sh runs them on the H100; a broken script there costs a call)."""

from __future__ import annotations

import random

import torch

from bench.evaluator_bench import bench_task, pick_seed
from bench.placement_probe import probe
from kernelrl.config.stages import EvalConfig
from kernelrl.tasks import get_task

CPU = EvalConfig(device="cpu", budget_s=0.1, correctness_trials=1, reverify=False, max_wall_s=90,
                 min_timeout_s=4.0, spread_threshold=10.0, memory_limit_mb=4096, keep_rounds=True)


def test_evaluator_bench_fix_k_times_every_later_repeat_with_the_first_ones_k(monkeypatch):
    """--fix-k: the first repeat calibrates, the later ones and the long run get its k as calls_per_span (that
    the evaluator keeps it is tests/test_evaluator.py's test_calls_per_span_fixes_k_for_the_whole_evaluation)."""
    import bench.evaluator_bench as eb

    seen = []

    def fake_one(task, source, cfg):
        seen.append(cfg.calls_per_span)
        return {"success": True, "k": cfg.calls_per_span or 37, "timing_s": 0.1, "score_raw": 2.0}

    monkeypatch.setattr(eb, "one", fake_one)
    task = get_task("09_Swish")
    row = bench_task(task, pick_seed(task, "cpu"), CPU, repeats=3, long_factor=2.0, fix_k=True)
    assert "error" not in row, row.get("error")
    assert seen == [0, 37, 37, 37] and row["fixed_k"] == 37  # 3 repeats, then the long run
    seen.clear()
    bench_task(task, pick_seed(task, "cpu"), CPU, repeats=2, long_factor=0.0, fix_k=False)
    assert seen == [0, 0]


def test_placement_probe_reports_within_and_between_group_spread():
    row = probe("09_Swish", "*", torch.device("cpu"), groups=3, rounds=3, target_ms=1.0, rng=random.Random(0))
    assert "error" not in row, row
    assert row["seed"] == pick_seed(get_task("09_Swish"), "cpu").name and row["k"] >= 1
    assert len(row["group_ratios"]) == 3 and all(r > 0 for r in row["group_ratios"])
    assert set(row["within_pct"]) == {"ref", "cand"} and set(row["between_pct"]) == {"ref", "cand", "ratio"}
    assert probe("09_Swish", "no_such_seed", torch.device("cpu"), 2, 2, 1.0, random.Random(0))["error"]
