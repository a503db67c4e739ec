"""Legitimate optimisations pass the hardened evaluator with no integrity flag: seed-corpus candidates (algebraic
folding, fusion, better primitives, a fused recurrent op) on a handful of built-in tasks across the 3 levels, on
CPU; a wrong seed scores 0 and a slower one scores below 1."""

from __future__ import annotations

import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import FATAL, evaluate

CFG = EvalConfig(device="cpu", budget_s=0.6, correctness_trials=5, reverify=False, max_wall_s=120,
                 spread_threshold=10.0, memory_limit_mb=6144)

# (task name, seed variant): each measured >= 3x faster on one CPU thread in the corpus's own table, so that a
# noisy shared machine still shows > 1; together they cover weight folding, reductions, a matrix chain reordered,
# a fused LSTM and a CNN whose pooling commutes with its head.
FASTER = [
    ("03_LayerNorm", "functional_layer_norm"),
    ("05_MinReduction", "amin"),
    ("04_TwoLinear_NoActivation", "fused_weights"),
    ("12_MatmulChain_Vector", "right_to_left"),
    ("03_LSTM", "fused_lstm_op"),
]


def _seed(task_name: str, variant: str | None = None, expect: str | None = None):
    from kernelrl.tasks import get_task
    from kernelrl.tasks.seeds import load_seeds

    task = get_task(task_name)
    seeds = [s for s in load_seeds(task) if (variant is None or s.name == variant)
             and (expect is None or s.expect == expect) and s.device == "any"]
    assert seeds, f"no seed {variant or expect} for {task_name}"
    return task, seeds[0]


@pytest.mark.parametrize("task_name, variant", FASTER)
def test_faster_seed_passes_with_no_flag(task_name, variant):
    task, seed = _seed(task_name, variant)
    res = evaluate(task, seed.source, CFG)
    info = f"{task.key}/{seed.name}: {res.speedup} flags={res.flags} error={(res.error or '')[:400]}"
    assert res.success and res.executable and res.correct, info
    assert not set(res.flags) & FATAL, info
    assert "task-input-independent" not in res.flags and "unstable-timing" not in res.flags, info
    assert res.speedup > 1.0, info


def test_wrong_seed_scores_zero():
    task, seed = _seed("02_Softmax", expect="wrong")
    res = evaluate(task, seed.source, CFG)
    assert not res.success and res.speedup == 0.0 and res.executable, res.to_dict()
    assert {"wrong-output", "shape-mismatch"} & set(res.flags)


def test_slower_seed_scores_below_one():
    task, seed = _seed("02_Softmax", "row_loop")
    res = evaluate(task, seed.source, CFG)
    assert res.success and 0 < res.speedup < 1.0, res.to_dict()
