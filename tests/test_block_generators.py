"""Every timing block's staging restarts both sides' random generators from the block's seed
(worker_inputs.restart_generators, evaluator version 15): a forward that draws (dropout) draws the same numbers on
both sides whatever either ran before the block. KernelBench L2 66_Matmul_Dropout_Softmax against itself failed
`timing-mismatch` on the H200 (bench/results/2026-11-28-h200x4-kernelbench, call c13b): the candidate's CUDA-graph
capture, after correctness, ran two warm-up calls the reference (captured in calibration) did not."""

import pytest
import torch

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import evaluate

DROPOUT_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """66_Matmul_Dropout_Softmax's pattern, small enough that graph replays beat eager calls on any GPU."""

    def __init__(self, n: int):
        super().__init__()
        self.matmul = nn.Linear(n, n)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        return torch.softmax(self.dropout(self.matmul(x)), dim=1)


def get_inputs():
    return [torch.rand(16, 256)]


def get_init_inputs():
    return [256]
'''
SELF = DROPOUT_TASK + "\n\nclass ModelNew(Model):\n    pass\n"


def _block(W, seed: int) -> list[torch.Tensor]:
    W.cmd_stage({"k": 3, "seed": seed}, [])
    W.cmd_go({"n": 3}, [])
    return [o.clone() for o in W.STATE["round_outs"]]


def test_a_block_draws_the_same_masks_whatever_ran_before_it():
    """The worker's own stage and go: the same block seed gives the same dropout masks after the generator was
    advanced in between (what a capture's warm-up calls do on one side only), and another seed other masks."""
    from kernelrl.evaluation import worker as W
    from kernelrl.evaluation.worker_inputs import input_template

    ns: dict = {}
    exec(compile(DROPOUT_TASK, "task.py", "exec"), ns)  # noqa: S102 - the test's own task source
    saved = dict(W.STATE)
    try:
        W.STATE.update(device="cpu", model=ns["Model"](256), graphs=None, staged=[], round_outs=[],
                       template=input_template(type("M", (), {"get_inputs": staticmethod(ns["get_inputs"])})))
        first = _block(W, 11)
        W.STATE["model"](torch.rand(16, 256))  # one side's extra call between blocks: its generator moved on
        torch.rand(1000)
        again = _block(W, 11)
        other = _block(W, 12)
    finally:
        W.STATE.clear()
        W.STATE.update(saved)
    assert len(first) == 3 and all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_dropout_reference_replayed_on_both_sides_scores_one():
    r = evaluate(DROPOUT_TASK, SELF, EvalConfig(device="cuda", budget_s=0.5, correctness_trials=4, reverify=True,
                                                max_wall_s=120))
    g = r.timing.get("graphs") or {}
    assert r.success and 0.95 <= r.speedup <= 1.05 and "timing-mismatch" not in r.flags, r.to_dict()
    assert g.get("used") is True, g  # the case that failed: both sides replayed, the candidate captured last
