"""``steps.bench`` (the pipeline's last stage) and ``kernelrl bench --source seeds`` end to end on CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
MARKER = "KERNELRL_MANIFEST "


def _have_evaluator() -> bool:
    return importlib.util.find_spec("kernelrl.evaluation") is not None and (
        importlib.util.find_spec("kernelrl.evaluation.service") is not None
        or hasattr(__import__("kernelrl.evaluation", fromlist=["evaluate"]), "evaluate"))


needs_evaluator = pytest.mark.skipif(not _have_evaluator(), reason="the evaluator (kernelrl.evaluation) has not "
                                     "landed yet")


def _run(args, home: Path, timeout=300):
    env = dict(os.environ, KERNELRL_HOME=str(home), OMP_NUM_THREADS="1")
    env.pop("KERNELRL_STORE_URL", None)
    env.pop("KERNELRL_CHECKPOINT_URI", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def _manifest(stdout: str) -> dict:
    line = [ln for ln in stdout.splitlines() if ln.startswith(MARKER)][-1]
    return json.loads(line[len(MARKER):])


def test_step_dry_run_and_a_run_without_candidates(tmp_path):
    home = tmp_path / "home"
    r = _run(["-m", "steps.bench", "--recipe", "smoke", "--run", "empty", "--dry-run"], home)
    assert r.returncode == 0, r.stderr
    m = _manifest(r.stdout)
    from kernelrl.config.recipes import load_recipe
    from kernelrl.training.common import recipe_tasks

    smoke = load_recipe("smoke")
    expected = len(recipe_tasks(smoke))  # the same tasks the training stages use (task_limit spread over levels)
    assert m["stage"] == "bench" and m["dry_run"] and m["metrics"]["tasks"] == expected
    # a run that produced nothing: every task scores 0, the report and manifest are still complete
    out = tmp_path / "m.json"
    r = _run(["-m", "steps.bench", "--recipe", "smoke", "--run", "empty", "--set", "bench.levels=[1, 3]",
              "--set", "bench.plots=false", "--manifest-out", str(out)], home)
    assert r.returncode == 0, r.stderr
    m = json.loads(out.read_text())
    met = m["metrics"]
    assert m["status"] == "done" and met["run_best_success"] == 0 and met["run_best_mean_speedup"] == 0.0
    assert met["teachers_best_success"] == 0 and met["teachers_best"]["n"] == met["tasks"]
    assert "L3_mean_speedup" in met["run_best"] and "L2_mean_speedup" not in met["run_best"]
    # no trained stage: the trained-policy row is left out, and the manifest and report say so
    assert "policy" not in met and "no finished" in met["policy_skipped"]
    report = Path(m["outputs"]["report"])
    text = report.read_text()
    assert report.exists() and "no successful candidate" in text and "no finished" in text
    assert "best kernel the run's policies generated" in text and "teachers' best" in text
    assert Path(m["outputs"]["report_uri"], "report.json").exists()  # copied to the checkpoint store
    r = _run(["-m", "steps.bench", "--recipe", "smoke", "--run", "x", "--set", "bench.levels=oops"], home)
    assert r.returncode == 2 and "Traceback" not in r.stderr


@needs_evaluator
@pytest.mark.slow  # ~60 s on the 2-core CI machine: in make test-slow (make test stays under 20 minutes)
def test_bench_seeds_end_to_end_on_cpu(tmp_path):
    """Three built-in tasks, their CPU seeds, a tiny budget: the real evaluator through the service."""
    home = tmp_path / "home"
    out = tmp_path / "report"
    three = "09_Swish,11_ELU,13_Hardsigmoid"  # cheap elementwise tasks: 2 CPU seeds each
    r = _run(["-m", "kernelrl.cli", "bench", "--source", "seeds", "--tasks", three,
              "--device", "cpu", "--budget-s", "0.3", "--correctness-trials", "3", "--out", str(out), "--json"],
             home, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout)
    s = data["summaries"]["seed corpus (best per task)"]["all"]
    assert s["n"] == 3 and s["success"] >= 2  # every task has a correct plain-PyTorch seed
    rep = json.loads((out / "report.json").read_text())
    rows = rep["sources"][0]["rows"]
    assert all(r["evaluated"] for r in rows if r["success"])
    assert (out / "hist_log_speedup.png").stat().st_size > 0 and (out / "tasks.csv").exists()
    # results are in the store as final evaluations
    from kernelrl.store import Store

    st = Store(f"sqlite:///{home / 'store.db'}")
    from sqlalchemy import func, select

    from kernelrl.store.models import EvaluationRow

    with st.session() as sess:
        n_final = sess.scalar(select(func.count()).select_from(EvaluationRow).where(EvaluationRow.purpose == "final"))
    assert n_final >= 3
    st.engine.dispose()
    # --stored renders the same numbers without timing again
    r2 = _run(["-m", "kernelrl.cli", "bench", "--source", "seeds", "--tasks", three,
               "--device", "cpu", "--stored", "--out", str(tmp_path / "again"), "--json", "--no-plots"], home)
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert json.loads(r2.stdout)["summaries"]["seed corpus (best per task)"]["all"]["mean"] == pytest.approx(s["mean"])


def test_vanilla_baseline_records_every_attempt_and_resumes(store, tmp_path):
    """Unparsable responses are kept as attempts with their reason; a second call asks only for what is missing."""
    from sqlalchemy import func, select

    from kernelrl.reports.baselines import collect_vanilla
    from kernelrl.config.stages import EvalConfig
    from kernelrl.store.models import AttemptRow
    from kernelrl.tasks import load_suite

    tasks = load_suite("builtin", [1])[:2]
    asked = []

    def generate(task, n):
        asked.append((task.name, n))
        return [f"no code here {i}" for i in range(n)]

    def parse(text):
        return None, "no code block"

    st = collect_vanilla(tasks, store, generate, parse, k=3, run_name="van", model="m", reward_cfg=EvalConfig())
    assert st == {"tasks": 2, "attempts": 6, "parsed": 0, "skipped_tasks": 0}
    with store.session() as s:
        rows = s.scalars(select(AttemptRow).where(AttemptRow.run_name == "van")).all()
        assert len(rows) == 6 and all(r.parse_error == "no code block" and r.candidate_id is None for r in rows)
    st = collect_vanilla(tasks, store, generate, parse, k=4, run_name="van", model="m", reward_cfg=EvalConfig())
    assert st["attempts"] == 2 and asked[-2:] == [(tasks[0].name, 1), (tasks[1].name, 1)]
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(AttemptRow)) == 8


@pytest.mark.slow  # ~15-30 s of real evaluations; collect_vanilla's plumbing is covered above
@needs_evaluator
def test_vanilla_baseline_end_to_end_with_a_canned_model(tmp_path):
    """A stand-in 'model' that answers with seed kernels: best of k by reward, then final-scored in the report."""
    from sqlalchemy import select

    from kernelrl.config.stages import EvalConfig
    from kernelrl.reports.baselines import run_vanilla
    from kernelrl.reports.runner import BenchOptions
    from kernelrl.store.models import EvaluationRow
    from kernelrl.store import Store
    from kernelrl.tasks.seeds import load_seeds

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.upgrade()

    def generate(task, n):
        seeds = [s.source for s in load_seeds(task) if s.device == "any" and s.expect != "wrong"]
        return [f"```python\n{seeds[i % len(seeds)]}\n```" for i in range(n)]

    def parse(text):
        return text.split("```python\n", 1)[1].rsplit("```", 1)[0], None

    tiny = EvalConfig(device="cpu", budget_s=0.2, correctness_trials=2, reverify=False)  # the reward protocol
    opts = BenchOptions(suite="builtin", tasks=["01_DiagMatmul"], device="cpu", budget_s=0.3, correctness_trials=3,
                        out=tmp_path / "van", plots=False, eval_base=tiny)
    report, paths = run_vanilla(opts, store, llm="canned", k=2, generate=generate, parse=parse)
    s = report.summaries()["vanilla best of 2 (canned)"]["all"]
    assert s.n == 1 and s.success == 1 and paths["markdown"].exists()
    with store.session() as sess:  # both samples reward-scored, the best one final-scored
        purposes = sorted(sess.scalars(select(EvaluationRow.purpose)).all())
    assert purposes == ["final", "reward", "reward"]


@pytest.mark.slow  # three real evaluations: 20-90 s on a shared 2-core machine
@needs_evaluator
def test_portability_and_ablate_on_cpu(tmp_path):
    """Kernels stored as scored on another device type are re-scored here; ablate switches in-place ops off."""
    from kernelrl.reports.ablation import run_ablation
    from kernelrl.reports.runner import BenchOptions, run_portability
    from kernelrl.reports.scoring import Scorer, final_config
    from kernelrl.store import Store
    from kernelrl.tasks import get_task
    from kernelrl.tasks.seeds import load_seeds

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.upgrade()
    task = get_task("08_RMSNorm")
    seed = next(s for s in load_seeds(task) if s.name == "vector_norm_rsqrt")
    cid = store.add_candidate(store.upsert_task(task), seed.source, origin_stage="crl", run_name="far")
    store.add_evaluation(cid, {"executable": True, "correct": True, "speedup": 1.7, "device_type": "Fake GPU 80GB",
                               "evaluator_version": "x"}, {}, purpose="final")
    opts = BenchOptions(suite="builtin", levels=[1], device="cpu", budget_s=0.3, correctness_trials=3,
                        out=tmp_path / "port", plots=False)
    report, paths = run_portability(opts, store, "Fake GPU 80GB")
    a, b = report.sources
    assert (a.label == "Fake GPU 80GB (stored)"
            and next(r for r in a.rows if r["task"] == "08_RMSNorm")["speedup"] == 1.7)
    rms = next(r for r in b.rows if r["task"] == "08_RMSNorm")
    assert rms["evaluated"] and rms["device_type"] != "Fake GPU 80GB"
    assert "## Portability" in paths["markdown"].read_text()

    with Scorer(store, final_config(None, device="cpu", budget_s=0.3, correctness_trials=3)) as scorer:
        result = run_ablation(task, seed.source, scorer)
    v = {x["technique"]: x for x in result["variants"]}
    assert v["inplace"]["switchable"] and v["inplace"]["success_off"]  # out-of-place is still correct


@pytest.mark.slow  # builds the tiny local model and generates (~30-60 s on a shared 2-core machine)
@needs_evaluator
def test_baselines_with_the_tiny_local_model(tmp_path):
    """The real LLM layer end to end: a random-weight model's answers are stored as attempts (they do not parse),
    nothing succeeds, and both baselines still write a complete report."""
    from sqlalchemy import select

    from kernelrl.store import Store
    from kernelrl.store.models import AttemptRow

    home = tmp_path / "home"
    r = _run(["-m", "kernelrl.cli", "bench", "--tasks", "01_DiagMatmul", "--device", "cpu", "--out",
              str(tmp_path / "van"), "--no-plots", "--json", "baseline", "vanilla", "--llm", "tiny", "--k", "2",
              "--max-tokens", "16"], home, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["summaries"]["vanilla best of 2 (tiny)"]["all"]["n"] == 1
    r = _run(["-m", "kernelrl.cli", "bench", "--tasks", "01_DiagMatmul", "--device", "cpu", "--out",
              str(tmp_path / "evo"), "--no-plots", "--json", "baseline", "evolve", "--llm", "tiny", "--rounds", "1",
              "--samples", "1"], home, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "evo" / "report.md").exists()
    st = Store(f"sqlite:///{home / 'store.db'}")
    with st.session() as s:
        runs = sorted({a.run_name for a in s.scalars(select(AttemptRow)).all()})
    st.engine.dispose()
    assert runs == ["baseline-evolve-tiny-island", "baseline-vanilla-tiny"]  # the paper's evolve: islands
