"""A wrong output says how much the reference varies on the same inputs (correctness.reference_variation,
worker_variation.cmd_rerun): two more runs of the reference, its state restored before each. A candidate as close
to the reference as the reference to itself passes that set (compare.within_variation, evaluator version 14),
within VARIATION_FACTOR and never past VARIATION_CAP x the dtype's bound. Failing that (version 17), a candidate as
close to the reference's float64 answer as float32 gets on that set passes it (compare.within_precision)."""

from __future__ import annotations

import pytest

from kernelrl.config.stages import EvalConfig
from kernelrl.evaluation import FATAL, evaluate

CFG = EvalConfig(device="cpu", budget_s=0.3, correctness_trials=3, reverify=False, max_wall_s=90,
                 spread_threshold=10.0)

TASK = '''
import os
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        return torch.tanh(x) + self.extra(x)

    def extra(self, x):
        return 0.0


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''
# noise from a source no seed reaches, scaled to the output: the reference differs from itself by ~1.4e-3 of its
# norm on the same inputs, past the cap (10 x float32's 1e-4)
NOISY = TASK.replace("        return 0.0",
                     "        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), 'little'))\n"
                     "        return 1e-3 * torch.tanh(x).pow(2).mean().sqrt() * torch.randn(x.shape, generator=g)")
# the same, ten times smaller: ~1.4e-4 run to run, over the 1e-4 bound and under the cap
SLIGHTLY_NOISY = NOISY.replace("return 1e-3 *", "return 1e-4 *")
# ... and a dropout: the reruns must leave the reference's random generators where they were, or its later timed
# calls draw other masks than the candidate's (a timing-mismatch for an honest copy)
DROPOUT = SLIGHTLY_NOISY.replace("return torch.tanh(x) +",
                                 "return torch.nn.functional.dropout(torch.tanh(x), 0.1, training=True) +")
# state that moves on every call: without the restore, the two runs would differ by 1 everywhere
STATEFUL = TASK.replace("        return 0.0", "        self.calls += 1\n        return self.calls")


def _cand(task: str, body: str = "        return super().forward(x)") -> str:
    return task + f"\n\nclass ModelNew(Model):\n    def forward(self, x):\n{body}\n"


def test_a_reference_that_varies_past_the_cap_says_so_and_fails_its_own_copy():
    r = evaluate(NOISY, _cand(NOISY), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and r.speedup == 0.0, r.to_dict()  # the verdict is unchanged
    assert 1e-3 < v.get("ref_rel_norm", 0) < 3e-3 and 1e-3 < v["cand_rel_norm"] < 3e-3, v
    assert v["within"] is False and "the reference against itself on these inputs" in r.error, r.error


def test_a_copy_of_a_slightly_noisy_reference_passes_within_its_variation():
    r = evaluate(SLIGHTLY_NOISY, _cand(SLIGHTLY_NOISY), CFG)
    v = r.timing.get("reference_variation") or {}
    assert r.correct and r.speedup > 0 and "wrong-output" not in r.flags, r.to_dict()
    assert "within-reference-variation" in r.flags and v["within"] is True, v
    assert 1e-4 < v["ref_rel_norm"] < 1e-3 and v["sets_passed"] >= 3, v  # every set failed the bound alone, and
    assert r.timing["audits"] >= 1 and v["sets_passed"] >= 3 + r.timing["audits"], r.timing  # each audit too


def test_the_reruns_leave_a_dropout_reference_drawing_what_the_candidate_draws():
    r = evaluate(DROPOUT, _cand(DROPOUT), CFG)
    v = r.timing.get("reference_variation") or {}
    assert r.correct and r.speedup > 0 and "timing-mismatch" not in r.flags, r.to_dict()
    assert v["sets_passed"] >= 3 + r.timing["audits"], r.timing


def test_a_real_error_beside_a_slightly_noisy_reference_still_fails():
    # 7e-4 of the output's norm: under the cap (1e-3), ~5x the reference's own variation (outside VARIATION_FACTOR)
    body = "        y = super().forward(x)\n        return y + 7e-4 * y.pow(2).mean().sqrt() * torch.sign(x)"
    r = evaluate(SLIGHTLY_NOISY, _cand(SLIGHTLY_NOISY, body), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and not r.correct and v.get("within") is False, r.to_dict()


# The reference's float32 answer ~9e-4 off the exact one (tanh rounded at 3e4's ulp) and noisy besides (~1.4e-4 run
# to run, past the bound): KernelBench L2 77 under torch.compile on the H200 (version 20)
ROUNDING_NOISY = SLIGHTLY_NOISY.replace("return torch.tanh(x) +", "return ((torch.tanh(x) + 3e4) - 3e4) +")


def test_a_candidate_more_accurate_than_a_noisy_reference_passes_within_its_precision(monkeypatch):
    # tanh itself: ~9e-4 from the reference, 3x its noise and more, yet ~1e-4 from the float64 answer (that run's
    # own noise) where the reference is ~9e-4; before version 20 a noisy reference judged nothing by precision.
    # Normal inputs only: the rounding step is absolute, and on the "small" variant (x 1e-3) it swamps the output,
    # so the numbers checked below (the last judged set's) would depend on which variant came last
    from kernelrl.evaluation import session as session_mod

    monkeypatch.setattr(session_mod, "VARIANTS", ("normal",))
    r = evaluate(ROUNDING_NOISY, _cand(ROUNDING_NOISY, "        return torch.tanh(x)"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert r.correct and "wrong-output" not in r.flags, r.to_dict()
    # scored, unless the one timing-noise verdict zeroed it: reference-slowed fired once on an idle 2-core host
    # (make test, 2026-12-07: correct, within-reference-precision, speedup 0); this test is about the correctness
    # judgement, and the noise flag is known (stop 59's note)
    assert not (set(r.flags) & FATAL) - {"reference-slowed"}, r.flags
    assert r.speedup > 0 or "reference-slowed" in r.flags, r.to_dict()
    assert "within-reference-precision" in r.flags and v["within"] is False and v["within_precision"] is True, v
    assert 1e-4 < v["ref_rel_norm"] < 1e-3 and v["cand_rel_norm"] > 3 * v["ref_rel_norm"], v  # noisy; not within
    assert v["cand_f64_rel_norm"] < 0.5 * v["ref_f64_rel_norm"], v


def test_a_deterministic_stateful_reference_does_not_vary_when_its_state_is_restored():
    r = evaluate(STATEFUL, _cand(STATEFUL, "        return super().forward(x) * 1.01"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags, r.to_dict()
    assert v.get("ref_rel_norm") == 0.0 and v["ref_max_abs"] == 0.0 and v["cand_rel_norm"] > 1e-3, v
    assert "relative error norm 0, max |diff| 0;" in r.error, r.error


# A near-cancelling reduction (evaluator version 17): the KL divergence of two near-uniform distributions, as
# KernelBench L1 98_KLDivLoss computes it on the evaluator's "small" inputs. Deterministic (no run-to-run variation),
# yet its float32 answer is 1e-3 to several times its value away from the float64 one on every set (the inputs are
# near-uniform in every variant): an honest reordering of the sum lands 5e-4 to 2e-2 from the reference, and no
# further from float64 than the reference (measured on CPU at 256 x 16384, five evaluations).
KL_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs():
    return [(torch.rand(256, 16384) * 1e-3).softmax(dim=-1), (torch.rand(256, 16384) * 1e-3).softmax(dim=-1)]


def get_init_inputs():
    return []
'''


def _kl_cand(expr: str) -> str:
    return KL_TASK + f"\n\nclass ModelNew(nn.Module):\n    def forward(self, p, t):\n        return {expr}\n"


def test_an_honest_reordering_of_a_near_cancelling_sum_passes_within_the_references_precision():
    r = evaluate(KL_TASK, _kl_cand("(t * (t.log() - p.log())).sum(1).mean()"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert r.correct and r.speedup > 0 and "wrong-output" not in r.flags, r.to_dict()
    assert "within-reference-precision" in r.flags and "within-reference-variation" not in r.flags, r.flags
    assert "reference-is-rounding" not in r.flags, r.flags  # named only where a set fails
    assert v["within"] is False and v["within_precision"] is True and v["ref_rel_norm"] == 0.0, v  # deterministic
    # the last such set: float32 itself is past the bound there, and the candidate no further from float64 than 8x
    assert v["cand_rel_norm"] > 1e-4 and v["ref_f64_rel_norm"] > 1e-4, v
    assert v["cand_f64_rel_norm"] <= 8 * v["ref_f64_rel_norm"] and v["f64_error"] is None, v


def test_a_sloppy_reduction_of_the_same_sum_still_fails_against_the_float64_answer():
    # the same KL as a difference of two large sums (entropy minus cross-entropy): ~12x the exact answer's norm away
    r = evaluate(KL_TASK, _kl_cand("((t * t.log()).sum() - (t * p.log()).sum()) / p.shape[0]"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and not r.correct and v.get("within_precision") is False, r.to_dict()
    assert "against the reference in float64: the reference" in r.error, r.error


def test_a_small_error_on_a_well_conditioned_task_is_not_excused_by_the_float64_run():
    # tanh is accurate to ~1e-7 in float32: a 2e-4 error is far outside 8x the reference's own distance from exact
    body = "        y = super().forward(x)\n        return y + 2e-4 * y.pow(2).mean().sqrt() * torch.sign(x)"
    r = evaluate(TASK, _cand(TASK, body), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and v.get("within_precision") is False, r.to_dict()
    assert v["ref_f64_rel_norm"] < 1e-6 and v["cand_f64_rel_norm"] > 1e-4, v


def test_the_precision_rule_on_a_set_where_float32_is_pure_rounding():
    # compare.within_precision with the numbers of a KL set whose float32 answer is ~6x off its float64 one (seen on
    # CPU): a candidate nearer the exact answer, or as far off as the reference, passes; zeros and a flipped sign
    # do not, nor anything when the reference's own two runs disagree past the bound
    import torch

    from kernelrl.evaluation.compare import output_diff, within_precision

    exact = [torch.tensor(8.1e-11, dtype=torch.float64)]
    ref = [torch.tensor(5.95e-10)]
    exact_nudged = [torch.tensor(8.0e-11, dtype=torch.float64)]
    runs = [ref, exact] + [x for v in (3.1e-10, 4.4e-10, 1.9e-10) for x in ([torch.tensor(v)], exact_nudged)]

    def ok(c, runs_diff=(0.0, 0.0), runs=runs, ref=ref):
        cand = [torch.tensor(c)]
        return within_precision(ref, cand, runs, runs_diff, output_diff(cand, ref))[0]

    assert ok(8.2e-11) and ok(6.1e-10) and ok(5.9e-10)
    assert not ok(0.0) and not ok(-5.95e-10) and not ok(-8.1e-11)
    assert not ok(8.2e-11, (2e-3, 1e-13))  # a reference that varies run to run past 10x float32's 1e-4
    drawn = [[torch.tensor(6.5e-10)]] + runs[1:]  # ... or answers otherwise with its random generators elsewhere
    assert not ok(8.2e-11, runs=drawn)
    # a well-conditioned set: the reference 1e-7 off; 2e-6 (20x) fails, 5e-7 passes
    exact, ref = [torch.tensor(1.0, dtype=torch.float64)], [torch.tensor(1.0 + 1e-7)]
    runs = [ref, exact] + [x for _ in range(3) for x in ([torch.tensor(1.0)], [torch.tensor(1.0, dtype=torch.float64)])]
    assert ok(1.0 + 5e-7, runs=runs, ref=ref) and not ok(1.0 + 2e-6, runs=runs, ref=ref)
    # a reference 3e-4 off that varies 2e-4 run to run (past 1e-4, under the cap): 2x its error, not 8x
    ref = [torch.tensor(1.0 + 3e-4)]
    nudged = ([torch.tensor(1.0)], [torch.tensor(1.0, dtype=torch.float64)])
    runs = [[torch.tensor(1.0 + 1e-4)], exact] + [x for _ in range(3) for x in nudged]
    assert ok(1.0 + 5e-4, (2e-4, 2e-4), runs=runs, ref=ref) and ok(1.0, (2e-4, 2e-4), runs=runs, ref=ref)
    assert not ok(1.0 + 7e-4, (2e-4, 2e-4), runs=runs, ref=ref)
    assert not ok(1.0 + 5e-4, (2e-4, 2e-4), runs=[[torch.tensor(1.0 + 1e-3)]] + runs[1:], ref=ref)  # it draws


# The mean of a standardised tensor: ~1e-17 exactly, float32 rounding in the reference's answer on every set, as
# KernelBench L2 23_Conv3d_GroupNorm_Mean's output is
CENTRED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return ((x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)).mean(1)


def get_inputs():
    return [torch.randn(64, 4096) + 100.0]


def get_init_inputs():
    return []
'''


def test_a_set_whose_reference_is_rounding_fails_and_says_so():
    # the same with each row reversed (another order of every sum): as far from float64 as the reference (~1e12
    # norms, the exact answer ~1e-17), and 1.2-1.5 norms from the reference's (CPU)
    body = ("        x = x.flip(1)\n"
            "        return ((x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)).mean(1)")
    r = evaluate(CENTRED, CENTRED + f"\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{body}\n", CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and "reference-is-rounding" in r.flags and not r.correct, r.to_dict()
    assert v["ref_f64_rel_norm"] > 1 and "rounding on this set (reference-is-rounding)" in r.error, (v, r.error)


def test_a_candidate_that_skips_a_dropout_is_not_excused_by_the_float64_run():
    # the reference's forward draws: its float64 run draws other masks, and the gap would excuse half a norm
    task = DROPOUT.replace("return 1e-4 *", "return 0.0 *")
    r = evaluate(task, _cand(task, "        return torch.tanh(x)"), CFG)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and v.get("within_precision") is False, r.to_dict()


@pytest.mark.gpu
def test_on_a_gpu_an_honest_reordering_passes_within_precision_and_a_sloppy_one_fails():
    """The precision runs on CUDA (a float64 copy on the device, inputs nudged by a device generator), at 8x the
    CPU test's rows: what KernelBench L1 98_KLDivLoss's torch.compile rows need (version 16 failed them)."""
    cfg = EvalConfig(device="cuda", budget_s=0.3, correctness_trials=4, reverify=False, max_wall_s=120)
    task = KL_TASK.replace("torch.rand(256, 16384)", "torch.rand(2048, 16384)")
    r = evaluate(task, _kl_cand("(t * (t.log() - p.log())).sum(1).mean()"), cfg)
    v = r.timing.get("reference_variation") or {}
    assert r.success and "within-reference-precision" in r.flags and v.get("f64_error") is None, r.to_dict()
    r = evaluate(task, _kl_cand("((t * t.log()).sum() - (t * p.log()).sum()) / p.shape[0]"), cfg)
    v = r.timing.get("reference_variation") or {}
    assert "wrong-output" in r.flags and v.get("within_precision") is False, r.to_dict()


def _device_compare_says_set_0_is_wrong(monkeypatch) -> list:
    """Outputs of every size compared "on the device" (Session.on_device), whose first comparison reports its first
    set wrong and the others pass; kept outputs stay on the CPU here. Returns the seeds of every draw_run call."""
    from kernelrl.evaluation import session as session_mod

    calls: list = []
    real_draw_run = session_mod.Session.draw_run

    def draw_run(self, worker, seeds, variants, timeout, ship=True, keep=False, prints=False, **kw):
        if worker is self.ref:
            calls.append((list(seeds), list(variants), keep))
        return real_draw_run(self, worker, seeds, variants, timeout, ship=ship, keep=keep, prints=prints, **kw)

    def compare_kept(self, hr, hc, timeout, sets=None):
        first = not any(c for c in calls[:-1] if c[2])  # the worker could not judge it (version 20's fallback)
        return "ok", {"bad": (0, "wrong-output", "output 0: relative error norm 0.002 > 0.0001") if first else None,
                      "judged": [], "unjudged": first}

    monkeypatch.setattr(session_mod.Session, "on_device", lambda self, out_bytes: self.share_ok)
    monkeypatch.setattr(session_mod.Session, "draw_run", draw_run)
    monkeypatch.setattr(session_mod.Session, "compare_kept", compare_kept)
    return calls


def test_a_wrong_output_found_on_the_device_is_judged_again_on_the_host(monkeypatch):
    """Version 19: a set whose outputs were compared on the device (large outputs, CUDA) and found wrong is run again,
    the same seed and variant, with its outputs shipped, where the reference's variation and precision can judge it
    (before, it failed at once: KernelBench L2 3 under torch.compile on the H200). The honest KL reordering then
    passes within the reference's precision; the sloppy one still fails, with the host's account of both."""
    calls = _device_compare_says_set_0_is_wrong(monkeypatch)
    r = evaluate(KL_TASK, _kl_cand("(t * (t.log() - p.log())).sum(1).mean()"), CFG)
    assert r.correct and "wrong-output" not in r.flags, r.to_dict()
    assert r.timing["device_compare_redone"] == 1, r.timing
    kept = [c for c in calls if c[2]]
    redo = calls[calls.index(kept[0]) + 1]
    assert not redo[2] and redo[0] == kept[0][0] and redo[1] == kept[0][1], calls  # the same sets, shipped
    calls.clear()
    bad = evaluate(KL_TASK, _kl_cand("((t * t.log()).sum() - (t * p.log()).sum()) / p.shape[0]"), CFG)
    assert "wrong-output" in bad.flags and not bad.correct, bad.to_dict()
    assert "the reference against itself on these inputs" in bad.error, bad.error  # judged on the host


# tanh rounded at 3e4's ulp: the reference's float32 answer ~9e-4 off the exact one, the same on every run
ROUNDED = TASK.replace("return torch.tanh(x) +", "return ((torch.tanh(x) + 3e4) - 3e4) +")


def test_a_wrong_output_compared_on_the_device_is_judged_in_the_reference_worker(monkeypatch):
    """Version 20: the reference's worker judges a set it found wrong on the device itself (worker_share.
    cmd_compare_kept with the sets' seeds: the reruns and the float64 runs stay on its device), where version 19 had
    the parent run it again through the host (L2 3: 105 s). In process on the CPU, the mapping faked: exact tanh
    passes within the reference's precision on both sets; an error of 2e-2 fails at the first, judged; without the
    seeds nothing is judged (version 19's reply); a reference that cannot be run again leaves it to the host."""
    import torch

    from kernelrl.evaluation import worker_share as W
    from kernelrl.evaluation import worker_variation as WV
    from kernelrl.evaluation.worker_inputs import draw_inputs, task_module
    from kernelrl.evaluation.worker_state import STATE

    mod = task_module(ROUNDED)
    model, sets = mod.Model(), [{"seed": 11, "variant": "normal"}, {"seed": 12, "variant": "scaled"}]
    xs = [draw_inputs(mod, w["seed"], w["variant"], torch.device("cpu"))[0] for w in sets]
    with torch.no_grad():
        ref = [model(x) for x in xs]
    exact = [torch.tanh(x) for x in xs]
    sloppy = [y + 2e-2 * y.pow(2).mean().sqrt() * torch.sign(y) for y in exact]
    cand: list = []

    class Mapped:  # the candidate's outputs "mapped": here, by index
        def __init__(self, dev):
            pass

        def view(self, d):
            return cand[d["i"]]

        def close(self):
            pass

    monkeypatch.setattr(W, "Opened", Mapped)
    keys = ("model", "module", "task_module", "task_source", "device", "kept")
    saved = {k: STATE[k] for k in keys if k in STATE}
    STATE.update(model=model, module=mod, task_module=None, task_source=None, device="cpu")

    def ask(outs, **judge):
        cand[:] = outs
        STATE["kept"] = list(ref)
        return W.cmd_compare_kept({"ipc": [{"i": 0}, {"i": 1}], "ref_structure": [1, 1], "cand_structure": [1, 1],
                                   **judge}, [])[0]

    try:
        judge = {"sets": sets, "out_bytes": 64 * 1024 * 4}
        r = ask(exact, **judge)
        assert r["bad"] is None and [i for i, _ in r["judged"]] == [0, 1], r
        assert set(r["times_s"]) == {"open", "compare", "close"} and min(r["times_s"].values()) >= 0, r
        rec = r["judged"][1][1]
        assert rec["within_precision"] and not rec["within"] and rec["ref_rel_norm"] == 0.0, rec
        assert rec["cand_f64_rel_norm"] < 1e-3 * rec["ref_f64_rel_norm"] and rec["f64_error"] is None, rec
        r = ask(sloppy, **judge)
        assert r["bad"][:2] == [0, "wrong-output"] and not r["unjudged"] and len(r["judged"]) == 1, r
        assert r["judged"][0][1]["within_precision"] is False, r
        r = ask(exact)  # no seeds: version 19's reply
        assert r["bad"][:2] == [0, "wrong-output"] and r["judged"] == [] and r["unjudged"], r
        monkeypatch.setattr(WV, "RERUN_STATE_MAX_BYTES", 0)  # the reference cannot say: the host path decides
        r = ask(exact, **judge)
        assert r["bad"][:2] == [0, "wrong-output"] and r["judged"] == [] and r["unjudged"], r
    finally:
        for k in keys:
            STATE.pop(k, None)
        STATE.update(saved)


def test_the_parent_takes_the_device_judgement_as_its_own(monkeypatch):
    """The records the reference's worker returns become the result's own (timing.reference_variation, the flag,
    device_compare_judged) and a set judged wrong there fails with the same account the host gives, not run again."""
    from kernelrl.evaluation import session as session_mod

    seen: list = []

    def compare_kept(self, hr, hc, timeout, sets=None):
        if not sets or "seed" not in sets[0]:  # a timing block's audit: it passes
            return "ok", {"bad": None, "judged": [], "unjudged": False}
        seen.append(sets)
        rec = {"ref_rel_norm": 0.0, "ref_max_abs": 0.0, "cand_rel_norm": 9e-4, "cand_max_abs": 1e-3,
               "within": False, "ref_f64_rel_norm": 9e-4, "ref_f64_max_abs": 1e-3, "cand_f64_rel_norm": 5e-8,
               "cand_f64_max_abs": 1e-7, "within_precision": True, "f64_error": None}
        return "ok", {"bad": None, "judged": [(0, rec)], "unjudged": False,
                      "times_s": {"open": 0.25, "compare": 0.5, "close": 0.125}}

    monkeypatch.setattr(session_mod.Session, "on_device", lambda self, out_bytes: self.share_ok)
    monkeypatch.setattr(session_mod.Session, "compare_kept", compare_kept)
    r = evaluate(ROUNDED, _cand(ROUNDED, "        return torch.tanh(x)"), CFG)
    # the reference worker's own seconds, summed over the correctness batches (where a compare's time goes)
    assert r.timing["device_compare_s"] == {"open": 0.25 * len(seen), "compare": 0.5 * len(seen),
                                            "close": 0.125 * len(seen)}, r.timing
    v = r.timing.get("reference_variation") or {}
    assert r.correct and "within-reference-precision" in r.flags and "device_compare_redone" not in r.timing, r.timing
    assert r.timing["device_compare_judged"] == len(seen) and v["sets_passed"] >= len(seen), r.timing
    assert all(w and all(isinstance(x["seed"], int) and isinstance(x["variant"], str) for x in w) for w in seen), seen


@pytest.mark.gpu
def test_on_a_gpu_a_set_found_wrong_on_the_device_is_judged_there(monkeypatch):
    """Versions 19-20 on CUDA: every output compared on the device (DEVICE_COMPARE_MIN_BYTES 0, as KernelBench's
    large outputs are); the honest KL reordering's sets that the device comparison finds past the bound are judged
    by the reference's worker on the device (version 20; version 19 ran them again through the host) and pass
    within the reference's precision; the sloppy one fails there with the same account."""
    from kernelrl.evaluation import session as session_mod

    monkeypatch.setattr(session_mod, "DEVICE_COMPARE_MIN_BYTES", 0)
    cfg = EvalConfig(device="cuda", budget_s=0.3, correctness_trials=4, reverify=False, max_wall_s=120)
    task = KL_TASK.replace("torch.rand(256, 16384)", "torch.rand(2048, 16384)")
    r = evaluate(task, _kl_cand("(t * (t.log() - p.log())).sum(1).mean()"), cfg)
    assert r.success and r.timing.get("device_compare") is True, r.to_dict()
    assert r.timing.get("device_compare_judged", 0) >= 1 and "within-reference-precision" in r.flags, r.to_dict()
    assert "device_compare_redone" not in r.timing, r.timing
    r = evaluate(task, _kl_cand("((t * t.log()).sum() - (t * p.log()).sum()) / p.shape[0]"), cfg)
    assert "wrong-output" in r.flags and r.timing.get("device_compare_judged", 0) >= 1, r.to_dict()
    assert "against the reference in float64: the reference" in r.error, r.error
