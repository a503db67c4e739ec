"""crl's exemplar pool and the paper's ablations on real parts (store, evaluator through the service), in-process:
the pool is the run's own candidates on one device type (``crl.pool: store`` widens it), plain GRPO uses the
augmentation prompt, and the island sampler's islands are assigned, advanced and migrate as crl scores."""

from __future__ import annotations

import json

from kernelrl.config.recipes import load_recipe
from kernelrl.tasks import get_task, load_seeds
from tests.test_llm_fixtures import chat_server, tiny_backend, tiny_model_path  # noqa: F401

TASK = "builtin/L1/02_Softmax"
FAST = {"eval.budget_s": 0.2, "eval.correctness_trials": 2, "eval.device": "cpu", "eval.reverify": False,
        "eval.interference_factor": 1e9}


def _success(store, task, speedup: float, source: str, run: str, device_type: str = "cpu") -> int:
    tid = store.upsert_task(task)
    cid = store.add_candidate(tid, source, origin_stage="augment", run_name=run)
    store.add_evaluation(cid, {"executable": True, "correct": True, "speedup": speedup, "flags": [],
                               "device_type": device_type, "evaluator_version": "test"})
    return cid


def test_crl_pool_is_the_runs_own_on_its_device_type_unless_pool_store(store):
    from kernelrl.training.crl import ContrastivePromptDataset, store_snapshot

    task = get_task(TASK)
    mine = _success(store, task, 1.3, "import torch\n# mine\n", "r1")
    theirs = _success(store, task, 9.0, "import torch\n# another run's\n", "r2")
    gpu = _success(store, task, 5.0, "import torch\n# measured on a GPU\n", "r1", device_type="NVIDIA H100")
    r = load_recipe("smoke", {"crl.sampler.n_exemplars": 4})
    ds = ContrastivePromptDataset([task], store, r, n_slots=2, run="r1")
    ds.as_of = store_snapshot(store)
    assert json.loads(ds[0]["exemplar_ids"]) == [mine]  # not r2's 9x, not the GPU measurement
    assert "1.30x" in ds[0]["prompt"][-1]["content"] and "9.00x" not in ds[0]["prompt"][-1]["content"]
    wide = ContrastivePromptDataset([task], store, load_recipe("smoke", {"crl.sampler.n_exemplars": 4,
                                                                         "crl.pool": "store"}), n_slots=1, run="r1")
    wide.as_of = ds.as_of
    assert sorted(json.loads(wide[0]["exemplar_ids"])) == sorted([mine, theirs])  # still no GPU speedup
    assert gpu not in json.loads(wide[0]["exemplar_ids"])


def test_plain_grpo_has_no_exemplars_and_no_contrastive_instruction(store):
    from kernelrl.llm.prompts import build_augment_messages
    from kernelrl.training.crl import ContrastivePromptDataset

    task = get_task(TASK)
    _success(store, task, 1.3, "import torch\n# mine\n", "r1")
    ds = ContrastivePromptDataset([task], store, load_recipe("smoke", {"crl.prompt": "plain"}), n_slots=1, run="r1")
    row = ds[0]
    assert row["prompt"] == build_augment_messages(task) and row["exemplar_ids"] == "[]"
    text = "\n".join(m["content"] for m in row["prompt"])
    assert "Performance Analysis" not in text and "speedup" not in text.lower().split("reference")[0]
    contrastive = ContrastivePromptDataset([task], store, load_recipe("smoke"), n_slots=1, run="r1")[0]
    assert "## Performance Analysis" in contrastive["prompt"][-1]["content"]  # what plain leaves out


def test_islands_are_assigned_advanced_and_migrate_in_crl(store, tmp_path):
    """Two islands, migration every second round: a prompt drawn from island i makes its new candidate a member
    of i; each scoring ends a round for the task; the second one migrates (the worse island is reseeded with the
    better one's best), and the state is persisted for a resumed run."""
    from kernelrl.training.crl import ContrastivePromptDataset, SpeedupReward, store_snapshot

    task = get_task(TASK)
    seeds = [s.source for s in load_seeds(task) if s.device == "any" and s.expect in ("faster", "slower")]
    a = _success(store, task, 1.1, "import torch\n# a\n", "isl")
    b = _success(store, task, 1.4, "import torch\n# b\n", "isl")
    r = load_recipe("smoke", {**FAST, "crl.sampler.kind": "island", "crl.sampler.n_islands": 2,
                              "crl.sampler.migration_interval": 2, "crl.sampler.n_exemplars": 2})
    ds = ContrastivePromptDataset([task], store, r, n_slots=2, state_path=tmp_path / "islands.json", run="isl")
    ds.as_of = store_snapshot(store)
    row = ds[0]
    tid = ds.task_ids[task.key]
    island = row["island"]
    # islands start as candidate_id % 2; the prompt shows its island's members, best first
    assert island in (0, 1) and json.loads(row["exemplar_ids"]) == [c for c in (b, a) if c % 2 == island]
    comps = [[{"role": "assistant", "content": f"```python\n{seeds[0]}```"}],
             [{"role": "assistant", "content": "no code"}]]

    class State:
        global_step = 0

    fn = SpeedupReward([task], store, r, "isl", "m", ds)
    try:
        def score(step):
            State.global_step = step
            return fn([row["prompt"]] * 2, comps, completion_ids=[[1], [2]], task_key=[task.key] * 2,
                      snapshot=[row["snapshot"]] * 2, exemplar_ids=[row["exemplar_ids"]] * 2, slot=[0, 0],
                      island=[island] * 2, trainer_state=State())

        out = score(0)
        assert out[0] > 0 and out[1] == 0.0
        (cid,) = store.run_candidate_ids("isl", ["crl"])
        g = ds.sampler.groups[str(tid)]
        assert cid in g["islands"][island] and cid not in g["islands"][1 - island]  # its prompt's island
        assert g["round"] == 1 and g["migrations"] == 0
        score(1)  # the same answer again (answered from the store): the second round migrates
    finally:
        fn.close()
    assert g["round"] == 2 and g["migrations"] == 1 and fn.per_step[1]["island_migrations"] == 1
    small, big = sorted(g["islands"], key=len)  # the worse island now holds the better island's best only
    assert len(small) == 1 and small[0] in big
    saved = json.loads((tmp_path / "islands.json").read_text())  # persisted (a resumed run continues from it)
    assert saved["groups"][str(tid)]["migrations"] == 1


def test_the_ablation_recipes_text_matches_the_code():
    """Every override `kernelrl bench ablations` prints is accepted by the recipe loader (and does what it says),
    and every source it names parses; the evolve baseline's defaults are the paper's (islands, up to 4)."""
    import inspect
    import re

    from kernelrl.cli.bench import ABLATION_RECIPES
    from kernelrl.reports.baselines import run_evolve
    from kernelrl.reports.policy import parse_policy_spec
    from kernelrl.step import parse_sets

    sets = re.findall(r"--set (\S+)", ABLATION_RECIPES)
    assert {"crl.prompt=plain", "crl.sampler.kind=island", "crl.sampler.kind=random",
            "crl.sampler.kind=bucket"} <= set(sets)
    for item in [*sets, "crl.sampler.n_exemplars=0"]:  # the text says n_exemplars=0 is accepted too
        r = load_recipe("smoke", parse_sets([item]))
        key, _, value = item.partition("=")
        obj = r
        for part in key.split("."):
            obj = getattr(obj, part)
        assert str(obj) == value
    specs = re.findall(r"--source (policy:\S+)", ABLATION_RECIPES)
    assert len(specs) == 4 and all(parse_policy_spec(s)[1] == "crl" for s in specs)
    sig = inspect.signature(run_evolve).parameters
    assert sig["sampler"].default == "island" and sig["exemplars"].default == 4


def test_evolve_baseline_uses_islands_and_up_to_4_exemplars(isolated_home, chat_server, tmp_path):  # noqa: F811
    """The evolve baseline with its defaults over the local chat server (canned answers, the real evaluator): the
    run records island sampling with 4 exemplars, the islands advance every round, and round 2's prompts are
    contrastive over the run's own verified kernel."""
    from sqlalchemy import select

    from kernelrl.config.stages import EvalConfig
    from kernelrl.reports.baselines import run_evolve
    from kernelrl.reports.runner import BenchOptions
    from kernelrl.store import Store
    from kernelrl.store.models import RunRow

    silu = "".join(ln for ln in [s for s in load_seeds(get_task("09_Swish")) if s.name == "silu"][0]
                   .source.splitlines(keepends=True) if not ln.startswith("# "))
    for note in ("fused", "variant a"):
        code = silu + f"# {note}\n"
        chat_server.faults.append(f"canned:## Performance Analysis\n{note}\n\n## Algorithm Design\n1. {note}\n\n"
                                  f"## Code Implementation\n```python\n{code}```\n")
    store = Store()
    store.ensure_ready()
    opts = BenchOptions(tasks=["09_Swish"], out=tmp_path / "evo", device="cpu", budget_s=0.2, correctness_trials=2,
                        plots=False, artifacts=False,
                        eval_base=EvalConfig(device="cpu", budget_s=0.2, correctness_trials=2, reverify=False,
                                             interference_factor=1e9))
    report, _ = run_evolve(opts, store, llm=f"{chat_server.base_url}#tiny", rounds=2, samples=1,
                           backend_kwargs={"concurrency": 1, "backoff_s": 0.01, "timeout_s": 30})
    run = "baseline-evolve-tiny-island"
    with store.session() as s:
        cfg = s.scalar(select(RunRow.config).where(RunRow.name == run))
    assert cfg["sampler"]["kind"] == "island" and cfg["sampler"]["n_exemplars"] == 4
    assert report.sources[0].label == "evolve (tiny, island, up to 4 exemplars)"
    state = json.loads((isolated_home / "runs" / run / "island-sampler.json").read_text())
    (group,) = state["groups"].values()
    assert group["round"] == 2 and len(group["seen"]) >= 1
    later = [r["messages"][-1]["content"] for r in chat_server.requests[1:]]
    assert len(later) == 1 and "### Implementation 1: speedup" in later[0] and "# fused" in later[0]
    assert report.sources[0].summaries()["all"].success == 1
