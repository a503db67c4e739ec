"""The eager estimate (issue 32, item 2; kernelrl/evaluation/eager.py): after the verdict each side's worker times
eager calls KernelBench's way on one fixed input set; ``timing.eager`` reports it beside the score, never as the
score. Real workers on CPU: an honest seed (numbers, order of phases, the score untouched), a wrong one (no phase),
a candidate that fails only in this phase (the evaluation stands); the reverify pass skips it; the report and the
``kernelrl eval`` line show it labelled."""

from __future__ import annotations

import json
import math
import types

import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import EvalResult, evaluate, round_toward_one
from kernelrl.evaluation import eager as E
from kernelrl.tasks import get_task

FAST = EvalConfig(device="cpu", budget_s=0.4, correctness_trials=4, reverify=False, max_wall_s=90,
                  spread_threshold=10.0, memory_limit_mb=4096)


def _seed(task_name: str, variant: str) -> tuple:
    from kernelrl.tasks.seeds import load_seeds

    task = get_task(task_name)
    return task, next(s for s in load_seeds(task) if s.name == variant).source


@pytest.fixture(scope="module")
def honest():
    """02_Softmax's torch.softmax seed (one fused kernel against the reference's five passes: ~2x on the reward
    clock, ~3x eager on the CPU VM), evaluated once for the tests below."""
    task, source = _seed("02_Softmax", "torch_softmax")
    # Evaluated again (at most twice) when the host slowed the reference during the rounds: `reference-slowed`
    # zeroes the score, and on the 2-core VM a busy neighbour does that to one run in a few full `make test` runs
    # (2026-11-28: all three tests below failed together on it). What these tests check is the eager phase.
    # The same for `harness-time-excess` (info, already charged): on a host with ~12% CPU steal (2026-11-29 CI) an
    # honest run drew it once; it comes from the verdict, before the eager phase runs, so it is not what's tested.
    for _ in range(3):
        r = evaluate(task, source, FAST)
        if not {"reference-slowed", "harness-time-excess"} & set(r.flags):
            break
    return r


def test_the_eager_phase_runs_last_and_reports_kernelbench_style_numbers(honest):
    r = honest
    assert r.success and r.speedup > 0, r.to_dict()
    e = r.timing["eager"]
    assert set(e) == {"ref_ms", "cand_ms", "speedup", "calls", "blocks", "method"}, e
    # per-call milliseconds (a unit slip to seconds or microseconds is 1000x off the reward clock's per-call times)
    for side in ("ref", "cand"):
        assert 1 <= e["calls"][side] <= E.EAGER_CALLS, e
        assert 0.2 < e[f"{side}_ms"] / r.timing[f"{side}_median_ms"] < 5, (e, r.timing[f"{side}_median_ms"])
    assert e["speedup"] == pytest.approx(e["ref_ms"] / e["cand_ms"], rel=1e-3)
    assert e["speedup"] > 1.0, e  # the sides are not swapped: the fused softmax is faster eagerly too
    assert 1 <= e["blocks"] <= E.EAGER_BLOCKS and "perf_counter" in e["method"]
    phases = list(r.timing["phases_s"])
    assert phases[-1] == "eager" and phases.index("post_checks") == len(phases) - 2, phases
    # bounded: ~EAGER_WALL_S per side, plus one input draw and the round trips (a loaded 2-core VM: x4)
    assert r.timing["phases_s"]["eager"] < 4 * (2 * E.EAGER_WALL_S) + 1.0, r.timing["phases_s"]


def test_the_eager_phase_changes_no_score_and_no_flag(honest):
    r = honest
    # the score is still the timing's rule (the interval's lower bound, rounded toward 1) and nothing was flagged
    assert r.speedup == round_toward_one(r.timing["score_raw"]) and r.speedup != r.timing["eager"]["speedup"]
    assert r.flags == [] and r.error is None, r.to_dict()
    assert json.loads(json.dumps(r.to_dict()))["timing"]["eager"] == r.timing["eager"]  # stored as is


def test_a_wrong_candidate_gets_no_eager_phase():
    task, source = _seed("02_Softmax", "wrong_dim")
    r = evaluate(task, source, FAST)
    assert not r.correct and r.speedup == 0.0, r.to_dict()
    assert "eager" not in r.timing and "eager" not in r.timing.get("phases_s", {}), r.timing


# Correct and ordinary until it is called twice in a row with the very same input tensor, which only the eager phase
# does (correctness draws a new set per call, the timed spans run distinct staged sets): then it raises.
_FAILS_EAGERLY = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None
        self.repeats = 0

    def forward(self, x):
        self.repeats = self.repeats + 1 if x is self.last else 0
        self.last = x
        if self.repeats >= 5:
            raise RuntimeError("eager-only failure")
        return torch.softmax(x, dim=1)
'''


def test_a_candidate_that_fails_only_in_the_eager_phase_keeps_its_evaluation():
    # Evaluated again (at most twice) when the host slowed the reference, as the fixture above does: one full make
    # test run on the 2-core VM (2026-12-06) zeroed this one so; what it checks is the eager phase.
    for _ in range(3):
        r = evaluate(get_task("02_Softmax"), _FAILS_EAGERLY, FAST)
        if "reference-slowed" not in r.flags:
            break
    assert r.success and r.speedup > 0 and r.speedup == round_toward_one(r.timing["score_raw"]), r.to_dict()
    # no flag from the eager phase; the timing's own information flags come and go with the VM's load (a full
    # make test run on the 2-core VM with other tests beside it saw harness-time-excess here)
    assert not set(r.flags) - {"harness-time-excess", "unstable-timing", "host-bound"}, r.to_dict()
    assert r.error is None, r.to_dict()
    err = r.timing["eager"]["error"]
    assert err.startswith("candidate: ") and "eager-only failure" in err and set(r.timing["eager"]) == {"error"}
    assert list(r.timing["phases_s"])[-1] == "eager"


def _session(**kw):
    return types.SimpleNamespace(**{"eager_estimate": True, "cand": object(), "ref": object(), "deadline": math.inf,
                                    **kw})


def test_the_phase_is_skipped_after_a_fatal_flag_when_off_and_near_the_wall_cap(monkeypatch):
    fatal = EvalResult(executable=True, correct=True, speedup=2.0, flags=["reference-slowed"])
    assert E.measure_eager(_session(), fatal, None) is False and "eager" not in fatal.timing
    wrong = EvalResult(executable=True, correct=False)
    assert E.measure_eager(_session(), wrong, None) is False and "eager" not in wrong.timing
    ok = EvalResult(executable=True, correct=True, speedup=2.0)
    assert E.measure_eager(_session(eager_estimate=False), ok, None) is False and "eager" not in ok.timing
    monkeypatch.setattr(E, "EAGER_ESTIMATE", False)
    assert E.measure_eager(_session(), ok, None) is False and "eager" not in ok.timing
    monkeypatch.setattr(E, "EAGER_ESTIMATE", True)
    import time

    assert E.measure_eager(_session(deadline=time.monotonic() + 1.0), ok, None) is False
    assert "max_wall_s" in ok.timing["eager"]["skipped"] and ok.speedup == 2.0


@pytest.mark.parametrize("ms", [None, [], [1.0] * 26, [float("nan")], [-1.0], [0.0], [True], ["1"], {"a": 1}])
def test_a_malformed_or_forged_reply_is_an_error_of_the_phase(ms):
    with pytest.raises(ValueError):
        E._checked({"ms": ms}, 25)
    assert E._checked({"ms": [0.5, 2]}, 25) == [0.5, 2.0]


def test_reverification_measures_no_eager_estimate(monkeypatch):
    from kernelrl.evaluation import api
    from kernelrl.evaluation.reverify import reverify

    seen = {}

    def fake(task, source, cfg, **kw):
        seen.update(kw)
        return EvalResult(executable=True, correct=True, speedup=4.0)

    monkeypatch.setattr(api, "evaluate", fake)
    first = EvalResult(executable=True, correct=True, speedup=4.0)
    reverify("task", "cand", FAST, "cpu", first)
    assert seen == {"eager_estimate": False} and first.timing["reverify_speedup"] == 4.0


def test_the_report_shows_the_score_and_the_eager_estimate_side_by_side_labelled(honest, tmp_path):
    from kernelrl.reports.report import Report, SourceResult, make_row

    ok = make_row(source="run", task_key="builtin/L1/02_Softmax", task="02_Softmax", level=1, code=None,
                  result=honest.to_dict())
    assert ok["eager_speedup"] == honest.timing["eager"]["speedup"] and ok["speedup"] == honest.speedup
    rep = Report("eager", [SourceResult("run", "x", [ok])], levels=[1])
    paths = rep.write(tmp_path, plots=False)
    md = paths["markdown"].read_text()
    head = next(line for line in md.splitlines() if line.startswith("| task | level |"))
    assert ("run: speedup (reward clock: CPU wall time, harness overhead removed)" in head
            and "run: eager est. (host included, KernelBench-style)" in head), head
    row = next(line for line in md.splitlines() if line.startswith("| 02_Softmax |"))
    assert f"| {honest.speedup:.2f} | {honest.timing['eager']['speedup']:.2f} |" in row, row
    assert "eager est. mean (n)" in md and "eager_speedup" in paths["csv"].read_text().splitlines()[0]


def test_kernelrl_eval_names_the_gpu_clock_and_prints_the_eager_line(monkeypatch, capsys, tmp_path):
    """The readable output on a GPU result (a stand-in evaluation: no GPU here): the CUDA clock note (device_type is
    the GPU's name, which the note's lookup once missed) and the eager estimate's line; its error form too."""
    import kernelrl.evaluation as ev
    from kernelrl.cli import main

    timing = {"estimate": 2.1, "ci_low": 2.0, "ci_high": 2.2, "rounds": 16, "calls_per_round": 10, "stop": "ci",
              "ref_median_ms": 0.5, "cand_median_ms": 0.25,
              "eager": {"ref_ms": 0.0421, "cand_ms": 0.0312, "speedup": 1.3494, "calls": {"ref": 100, "cand": 100},
                        "blocks": 4, "method": "x"}}
    res = EvalResult(executable=True, correct=True, speedup=2.0, timing=timing, device_type="NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: res)
    cand = tmp_path / "cand.py"
    cand.write_text("class ModelNew: pass\n")

    def run() -> str:
        try:
            main(["eval", "02_Softmax", str(cand), "--device", "cpu"])
        except SystemExit as e:
            assert not e.code
        return capsys.readouterr().out

    out = run()
    assert "\nclock       GPU time per call with launch overhead removed" in out, out
    assert ("\neager est.  1.35x (ref 0.0421 ms, cand 0.0312 ms per call, host included; not the reward)\n"
            in out), out
    timing["eager"] = {"error": "candidate: RuntimeError: boom\nmore"}
    assert "\neager est.  not measured (candidate: RuntimeError: boom)\n" in run()
    del timing["eager"]
    assert "eager est." not in run()
