"""Training-stage building blocks on real parts (store, evaluator, tiny model), in-process and fast:
seed-corpus teacher answers, task selection, contrastive prompt slots (identical per group, snapshot recorded,
as-of honoured), the speedup reward through the real evaluation service, SFT pair selection."""

from __future__ import annotations

import json

import pytest

from kernelrl.config.recipes import load_recipe
from kernelrl.tasks import get_task, load_seeds
from tests.test_llm_fixtures import tiny_model_path  # noqa: F401


def test_seed_answers_are_header_free_and_ordered():
    from kernelrl.training.augment import seed_answers, strip_seed_header

    task = get_task("builtin/L1/02_Softmax")
    answers = seed_answers(task, "cpu")
    seeds = [s for s in load_seeds(task) if s.device == "any"]
    assert len(answers) == len(seeds) and all(not a.startswith("# kernelrl-seed") for a in answers)
    assert all("# expect:" not in a.split("\n", 3)[0] for a in answers)
    first = min((s for s in seeds if s.expect == "faster"), key=lambda s: s.name)
    assert answers[0] == strip_seed_header(first.source) and "class ModelNew" in answers[0]
    assert len(seed_answers(task, "cuda")) >= len(answers)  # CUDA/Triton seeds only on a GPU
    assert strip_seed_header("import torch\n") == "import torch\n"


def test_recipe_tasks_spread_over_levels_like_bench():
    # The bench stage selects tasks with this same function (kernelrl.reports.runner uses recipe_tasks).
    from kernelrl.training.common import recipe_tasks

    r = load_recipe("smoke", {"task_limit": 4})
    keys = [t.key for t in recipe_tasks(r)]
    assert len(keys) == 4
    assert {k.split("/")[1] for k in keys} == {"L1", "L2", "L3"}


def _seed_success(store, task, speedup: float, source: str | None = None) -> int:
    tid = store.upsert_task(task)
    src = source or [s.source for s in load_seeds(task) if s.expect == "faster"][0]
    cid = store.add_candidate(tid, src, origin_stage="augment", run_name="u")
    store.add_evaluation(cid, {"executable": True, "correct": True, "speedup": speedup, "flags": [],
                               "device_type": "cpu", "evaluator_version": "test"})
    return cid


def test_contrastive_slots_identical_per_group_and_as_of(store):
    from kernelrl.training.crl import ContrastivePromptDataset, store_snapshot

    task = get_task("builtin/L1/02_Softmax")
    r = load_recipe("smoke", {"crl.sampler.n_exemplars": 1})
    cid = _seed_success(store, task, 1.3)
    ds = ContrastivePromptDataset([task], store, r, n_slots=4)
    ds.as_of = store_snapshot(store)
    a, b = ds[0], ds[0]
    assert a == b and a["snapshot"] == ds.as_of and json.loads(a["exemplar_ids"]) == [cid]
    assert "1.30x" in a["prompt"][-1]["content"] and a["task_key"] == task.key
    # a success stored after the snapshot is invisible to later slots until the snapshot advances
    cid2 = _seed_success(store, task, 9.0, source="import torch\nclass ModelNew: pass\n")
    assert json.loads(ds[1]["exemplar_ids"]) == [cid]
    ds.as_of = store_snapshot(store)
    seen = {tuple(json.loads(ds[i]["exemplar_ids"])) for i in (2, 3)}
    assert seen <= {(cid,), (cid2,)} and ds[2]["snapshot"] == ds.as_of
    assert ds[0] == a  # built slots are frozen


def test_speedup_reward_evaluates_and_records(store):
    """The reward through the real evaluator: a seed scores its speedup, garbage scores 0; every completion is
    an attempt with the prompt's snapshot and exemplar ids."""
    from sqlalchemy import select

    from kernelrl.store.models import AttemptRow
    from kernelrl.training.crl import ContrastivePromptDataset, SpeedupReward

    task = get_task("builtin/L1/02_Softmax")
    r = load_recipe("smoke", {"eval.budget_s": 0.2, "eval.correctness_trials": 2})
    cid = _seed_success(store, task, 1.1)
    ds = ContrastivePromptDataset([task], store, r, n_slots=1)
    row = ds[0]
    good = [s.source for s in load_seeds(task) if s.expect in ("faster", "slower") and s.device == "any"][0]
    comps = [[{"role": "assistant", "content": f"```python\n{good}```"}],
             [{"role": "assistant", "content": "no code here"}]]

    class State:
        global_step = 3

    logged = {}
    fn = SpeedupReward([task], store, r, "rr", "m", ds)
    try:
        out = fn([row["prompt"]] * 2, comps, completion_ids=[[1, 2], [3]], task_key=[task.key] * 2,
                 snapshot=[row["snapshot"]] * 2, exemplar_ids=[row["exemplar_ids"]] * 2, slot=[0, 0],
                 trainer_state=State(), log_metric=lambda k, v: logged.__setitem__(k, v))
    finally:
        fn.close()
    assert out[0] > 0 and out[1] == 0.0
    assert logged["kernelrl/success_rate"] == 0.5 and fn.per_step[3]["completion_tokens"] == 3
    with store.session() as s:
        rows = s.scalars(select(AttemptRow).where(AttemptRow.stage == "crl")).all()
        assert len(rows) == 2 and {a.snapshot for a in rows} == {row["snapshot"]}
        assert [a.exemplar_ids for a in rows] == [[cid]] * 2, [(a.exemplar_ids, a.dedup_key) for a in rows]
        assert all(a.dedup_key.startswith("rr:crl:3:") for a in rows)
        assert sorted(a.candidate_id is None for a in rows) == [False, True]
    assert ds.as_of >= row["snapshot"]


def test_augment_pairs_only_this_runs_successes(store):
    from kernelrl.training.sft import augment_pairs, with_contrastive_copies

    task = get_task("builtin/L1/02_Softmax")
    tid = store.upsert_task(task)
    ok = _seed_success(store, task, 1.2)
    bad = store.add_candidate(tid, "import torch\n# wrong\n", origin_stage="augment", run_name="r")
    store.add_evaluation(bad, {"executable": True, "correct": False, "speedup": 0.0, "flags": ["wrong-output"]})
    other = _seed_success(store, task, 2.0, source="import torch\n# another run\n")
    for c in (ok, bad):
        store.add_attempt(tid, stage="augment", run_name="r", candidate_id=c, response="x", dedup_key=f"k{c}")
    store.add_attempt(tid, stage="augment", run_name="elsewhere", candidate_id=other, response="y", dedup_key="o")
    pairs = augment_pairs(store, [task], "r")
    assert [p["candidate_id"] for p in pairs] == [ok]
    assert pairs[0]["completion"][0]["content"].startswith("```python\n") and pairs[0]["prompt"][0]["role"] == "system"
    r = load_recipe("smoke", {})
    rows = with_contrastive_copies(pairs, store, [task], r, 2)
    assert len(rows) == 3 and rows[1]["completion"] == pairs[0]["completion"]
    assert "speedup" in rows[1]["prompt"][-1]["content"].lower() and rows[1]["prompt"] != pairs[0]["prompt"]


@pytest.mark.parametrize("bad", ["crl.group_size=3"])
def test_crl_batch_must_split_over_processes(bad, monkeypatch):
    from kernelrl.errors import ConfigError
    from kernelrl.training.crl import _build_args

    monkeypatch.setenv("WORLD_SIZE", "2")
    k, v = bad.split("=")
    r = load_recipe("smoke", {k: int(v), "crl.prompts_per_step": 1})
    with pytest.raises(ConfigError, match="must divide"):
        _build_args(r, __import__("pathlib").Path("/tmp/unused"))


def test_drop_too_long(tiny_model_path):
    from transformers import AutoTokenizer

    from kernelrl.training.sft import drop_too_long

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    rows = [{"prompt": [{"role": "user", "content": "x " * n}], "completion": [{"role": "assistant", "content": "y"}]}
            for n in (5, 500)]
    keep, dropped = drop_too_long(rows, tok, 100)
    assert keep == rows[:1] and dropped == 1


def test_kernelrl_train_cli(isolated_home):
    from typer.testing import CliRunner

    from kernelrl.cli import app

    r = CliRunner().invoke(app, ["train", "augment", "--recipe", "smoke", "--run", "cli", "--dry-run",
                                 "--set", "task_limit=2"])
    assert r.exit_code == 0, r.output
    assert '"dry_run": true' in r.output and '"tasks": 2' in r.output
    r = CliRunner().invoke(app, ["train", "nope", "--run", "cli"])
    assert r.exit_code == 2
    r = CliRunner().invoke(app, ["train", "sft", "--run", "other"])  # augment has not run for this run
    assert r.exit_code == 2 and "has not finished" in r.output
    r = CliRunner().invoke(app, ["train", "sft", "--run", "cli"])  # augment (a dry run) stored nothing to learn
    assert r.exit_code == 2 and "no successful snippet" in r.output


def test_eval_service_lease_comes_from_the_environment_and_must_be_positive(store, monkeypatch):
    """KERNELRL_EVAL_LEASE_S: how long a stage's claim on a job lasts without a heartbeat (a killed stage's rerun
    takes its job over once it lapses); no in-process workers here (KERNELRL_EVAL_LOCAL_WORKERS=0)."""
    from kernelrl.config.stages import EvalConfig
    from kernelrl.training.common import eval_service

    monkeypatch.setenv("KERNELRL_EVAL_LOCAL_WORKERS", "0")
    monkeypatch.setenv("KERNELRL_EVAL_LEASE_S", "8")
    for value, want in (("8", 8.0), (None, 30.0)):
        if value is None:
            monkeypatch.delenv("KERNELRL_EVAL_LEASE_S")
        svc = eval_service(store, EvalConfig(device="cpu"))
        try:
            assert svc.queue.lease_s == want
        finally:
            svc.close()
    for bad in ("0", "-3"):
        monkeypatch.setenv("KERNELRL_EVAL_LEASE_S", bad)
        with pytest.raises(ValueError, match="KERNELRL_EVAL_LEASE_S"):
            eval_service(store, EvalConfig(device="cpu"))
