"""The policy source of reports (issue 31) on real parts: a stage's checkpoint (the tiny local model) sampled with
fixed seeds in its own prompt format and the other, every sample stored and a row of its own, the contrastive
prompts drawn from the run's own pool only, provenance recorded, a re-run idempotent; and the spec's errors."""

from __future__ import annotations

import json

import pytest

from kernelrl.config.recipes import load_recipe
from kernelrl.errors import KernelRLError
from kernelrl.tasks import get_task
from tests.test_llm_fixtures import tiny_model_path  # noqa: F401

TASK = "builtin/L1/02_Softmax"


def _finished(store, run: str, stage: str, model_dir: str, metrics: dict | None = None) -> None:
    store.ensure_run(run, "smoke")
    store.set_stage(run, stage, status="done", recipe="smoke",
                    manifest={"stage": stage, "outputs": {"model_dir": model_dir}, "metrics": metrics or {}})


def _success(store, task, speedup, source, run):
    tid = store.upsert_task(task)
    cid = store.add_candidate(tid, source, origin_stage="augment", run_name=run)
    store.add_evaluation(cid, {"executable": True, "correct": True, "speedup": speedup, "flags": [],
                               "device_type": "cpu", "evaluator_version": "test"})
    return cid


def test_policy_source_samples_the_checkpoint_in_both_formats(store, tiny_model_path, tmp_path):  # noqa: F811
    from sqlalchemy import select

    from kernelrl.reports.runner import BenchOptions, run_bench
    from kernelrl.store.models import AttemptRow

    task = get_task(TASK)
    mine = _success(store, task, 1.3, "import torch\n# p1's kernel\n", "p1")
    _success(store, task, 9.0, "import torch\n# another run's kernel\n", "p2")
    _finished(store, "p1", "crl", str(tiny_model_path))
    recipe = load_recipe("smoke", {"crl.eval_max_new_tokens": 12, "crl.sampler.n_exemplars": 4})
    opts = BenchOptions(sources=["policy:p1/crl@both"], labels=[""], tasks=[task.name], out=tmp_path / "r",
                        device="cpu", budget_s=0.2, correctness_trials=2, plots=False, artifacts=False,
                        recipe=recipe, policy_k=2)
    report, paths = run_bench(opts, store)
    assert [s.label for s in report.sources] == ["trained policy (p1 crl, contrastive prompt)",
                                                 "trained policy (p1 crl, augment prompt)"]
    for s, fmt in zip(report.sources, ("contrastive", "augment")):
        assert s.unit == "kernel" and len(s.rows) == 2  # k samples of the one task, each a row
        # the random-weight model writes no code: unsuccessful rows that say why
        assert all(not r["success"] and r["error"].startswith("no code in the answer") for r in s.rows)
        p = s.provenance
        assert p["checkpoint"] == str(tiny_model_path) and p["prompt_format"] == fmt and p["seed"] == 4321
        assert p["k"] == 2 and p["stage"] == "crl" and p["temperature"] == recipe.crl.eval_temperature
    pool = report.sources[0].provenance
    assert pool["exemplar_ids"] == {task.key: [mine]}  # the run's own pool: never p2's 9x kernel
    assert "run p1's own candidates" in pool["pool"] and "device type cpu" in pool["pool"]
    assert "pool" not in report.sources[1].provenance
    saved = json.loads(paths["json"].read_text())
    assert saved["sources"][0]["provenance"]["prompt_format"] == "contrastive"

    def attempts():
        with store.session() as s:
            return s.scalars(select(AttemptRow).where(AttemptRow.run_name == "p1", AttemptRow.stage == "bench-policy")
                             .order_by(AttemptRow.id)).all()

    first = attempts()
    assert len(first) == 4 and sorted(a.exemplar_ids for a in first) == [[], [], [mine], [mine]]
    run_bench(opts, store)  # fixed seeds: the same samples again, recorded once
    assert [a.dedup_key for a in attempts()] == [a.dedup_key for a in first]


@pytest.mark.parametrize("spec, message", [
    ("policy:crl", "expected policy:RUN/STAGE"),
    ("policy:p1/augment", "has no policy"),
    ("policy:p1/crl@fancy", "prompt format 'fancy'"),
    ("policy:p1/selfsup", "has not finished"),
    ("policy:nobody/auto", "no finished sft, selfsup or crl"),
])
def test_policy_spec_errors_are_one_line(store, spec, message, tmp_path):
    from kernelrl.reports.runner import BenchOptions, run_bench

    _finished(store, "p1", "crl", str(tmp_path / "no-model"))
    opts = BenchOptions(sources=[spec], tasks=["02_Softmax"], out=tmp_path / "r", device="cpu", plots=False,
                        artifacts=False, recipe=load_recipe("smoke"))
    with pytest.raises(KernelRLError, match=message):
        run_bench(opts, store)


def test_ladder_is_the_policies_then_the_best_kernels(store, tiny_model_path, tmp_path):  # noqa: F811
    from typer.testing import CliRunner

    from kernelrl.cli import app
    from kernelrl.reports.stage import RUN_BEST_LABEL, TEACHERS_LABEL

    for stage in ("sft", "crl"):  # selfsup did not finish: its rung is left out
        _finished(store, "L", stage, str(tiny_model_path))
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text("eval: {device: cpu}\nsft: {eval_max_new_tokens: 8}\ncrl: {eval_max_new_tokens: 8}\n")
    res = CliRunner().invoke(app, ["bench", "--store-url", store.url, "--tasks", "02_Softmax", "--recipe", str(recipe),
                                   "--policy-k", "1", "--device", "cpu", "--no-plots", "--json", "--out",
                                   str(tmp_path / "out"), "ladder", "--run", "L"])
    assert res.exit_code == 0, res.output
    summaries = json.loads(res.stdout[res.stdout.index("{"):])["summaries"]
    assert list(summaries) == ["stage 1 (sft policy)", "stage 1+2+crl (crl policy)", RUN_BEST_LABEL, TEACHERS_LABEL]
    assert summaries["stage 1 (sft policy)"]["all"]["n"] == 1 and summaries[TEACHERS_LABEL]["all"]["n"] == 1


def test_policies_compared_on_the_pool_as_crl_began(store, tiny_model_path, tmp_path):  # noqa: F811
    """--policy-as-of crl-start: selfsup and crl see the same exemplars, none of crl's own kernels (issue 30 item 7)."""
    from kernelrl.reports.policy import pool_as_of
    from kernelrl.reports.runner import BenchOptions, run_bench
    from kernelrl.training.crl import store_snapshot

    task = get_task(TASK)
    before = _success(store, task, 1.3, "import torch\n# selfsup's kernel\n", "p1")
    start = store_snapshot(store)
    _success(store, task, 2.5, "import torch\n# a kernel crl wrote\n", "p1")
    _finished(store, "p1", "selfsup", str(tiny_model_path))
    _finished(store, "p1", "crl", str(tiny_model_path),
              {"training": {"snapshots": [1], "start_snapshot": start, "final_snapshot": store_snapshot(store)}})
    assert pool_as_of("crl-start", store, "p1") == start and pool_as_of("7", store, "p1") == 7
    assert pool_as_of(None, store, "p1") is None
    recipe = load_recipe("smoke", {"crl.eval_max_new_tokens": 8, "selfsup.eval_max_new_tokens": 8,
                                   "crl.sampler.n_exemplars": 4})
    opts = BenchOptions(sources=["policy:p1/selfsup@contrastive", "policy:p1/crl@contrastive"], labels=["s", "c"],
                        tasks=[task.name], out=tmp_path / "r", device="cpu", budget_s=0.2, correctness_trials=2,
                        plots=False, artifacts=False, recipe=recipe, policy_k=1, policy_as_of="crl-start")
    report, _ = run_bench(opts, store)
    for s in report.sources:
        assert s.provenance["as_of"] == start and s.provenance["exemplar_ids"] == {task.key: [before]}
    opts.policy_as_of = None  # each stage's own end: crl's final pool holds its own kernel too
    report, _ = run_bench(opts, store)
    assert len(report.sources[1].provenance["exemplar_ids"][task.key]) == 2
    with pytest.raises(KernelRLError, match="expected an evaluation id or crl-start"):
        pool_as_of("yesterday", store, "p1")
    _finished(store, "p3", "crl", str(tiny_model_path))
    with pytest.raises(KernelRLError, match="no crl stage that recorded its start snapshot"):
        pool_as_of("crl-start", store, "p3")


def test_a_resumed_bench_samples_the_policy_on_the_pool_its_first_attempt_found(store, tiny_model_path):  # noqa: F811
    """A stage that recorded no snapshot of its own is sampled on the pool as the bench found it; a bench killed
    after storing final evaluations and run again must build the same prompts (the slow suite's kill test once made
    a fourth bench-policy attempt where an unkilled run makes three). The pin lives in the bench stage's inputs
    until the stage is done."""
    from types import SimpleNamespace

    from kernelrl.reports.stage import policy_pool_pin
    from kernelrl.training.crl import store_snapshot

    task = get_task(TASK)
    _success(store, task, 1.3, "import torch\n# sft's kernel\n", "p4")
    _finished(store, "p4", "sft", str(tiny_model_path))  # no snapshot recorded
    store.set_stage("p4", "bench", status="running", recipe="smoke")
    ctx = SimpleNamespace(store=store, run="p4")
    first = policy_pool_pin(ctx, "policy:p4/sft@contrastive")
    assert first == store_snapshot(store) > 0
    _success(store, task, 9.0, "import torch\n# a final evaluation the killed bench stored\n", "p4")
    store.set_stage("p4", "bench", status="running", recipe="smoke")  # the re-run after the kill
    assert policy_pool_pin(ctx, "policy:p4/sft@contrastive") == first < store_snapshot(store)
    store.set_stage("p4", "bench", status="done", recipe="smoke", inputs={})  # run_step's done: the pin ends
    store.set_stage("p4", "bench", status="running", recipe="smoke")  # a later bench (forced) pins its own
    assert policy_pool_pin(ctx, "policy:p4/sft@contrastive") == store_snapshot(store) > first
    _finished(store, "p4", "crl", str(tiny_model_path), {"training": {"final_snapshot": first}})
    assert policy_pool_pin(ctx, "policy:p4/crl@contrastive") is None  # crl's own snapshot rules
    from kernelrl.errors import StoreError

    with pytest.raises(StoreError, match="has no stage bench"):
        store.set_stage_inputs("p5", "bench", {})
