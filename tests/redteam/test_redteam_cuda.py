"""The CUDA red team through the real evaluator (run on an H100; skipped without a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import FATAL, evaluate
from kernelrl.tasks import get_task

HERE = Path(__file__).parent / "cuda"
HONEST_BOUND = 20.0
FAIL, HONEST = "fail", "honest"
EXPECT = {
    # The device-wide sync counts side-stream work: it earns no more than its real (here: 20x) work.
    "side_stream": (HONEST, set()),
    "patch_sync_and_events": (HONEST, set()),
    "gpu_background_load": (HONEST, {"reference-slowed", "timeout"}),
    "tf32_precision": (FAIL, {"wrong-output"}),
    "gpu_oom": (FAIL, {"out-of-memory", "runtime-error"}),
    "illegal_address": (FAIL, {"crashed", "runtime-error"}),
    "honest_cuda_graph": (HONEST, set()),
    "l2_persistence": (HONEST, {"reference-slowed"}),
    "cudnn_flags": (HONEST, set()),
}
CFG = EvalConfig(device="cuda", budget_s=1.0, correctness_trials=5, reverify=False, max_wall_s=300,
                 spread_threshold=10.0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_redteam_cuda(name):
    kind, allowed = EXPECT[name]
    res = evaluate(get_task("02_Softmax"), (HERE / f"{name}.py").read_text(), CFG)
    fatal = set(res.flags) & FATAL
    info = f"{name}: success={res.success} speedup={res.speedup} flags={res.flags} error={(res.error or '')[:300]}"
    print(info)
    if kind == FAIL:
        assert not res.success and fatal & allowed, info
    elif fatal:
        assert fatal <= allowed and res.speedup == 0.0, info
    else:
        assert res.success and 0 < res.speedup <= HONEST_BOUND, info


def test_every_cuda_candidate_has_an_expectation():
    assert {p.stem for p in HERE.glob("*.py")} == set(EXPECT)
