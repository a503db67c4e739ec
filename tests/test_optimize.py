"""``kernelrl optimize`` end to end on CPU: the tiny local model through the CLI (every attempt recorded,
resumable), and the HTTP backend against the local chat-completions server answering with recorded
responses (so the parse -> evaluate -> exemplar -> contrastive-prompt -> best-file path runs on the real
evaluator and evaluation service)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from kernelrl.config.stages import EvalConfig
from kernelrl.store.models import AttemptRow, CandidateRow, EvalJobRow, EvaluationRow
from kernelrl.tasks import get_task, load_seeds
from tests.test_llm_fixtures import chat_server, tiny_backend, tiny_model_path  # noqa: F401

# Short timing, and no reference-slowed verdicts: the shared 2-core test machine is often busy, and these tests
# check the search's plumbing, not the evaluator's interference detection.
FAST_EVAL = EvalConfig(device="cpu", budget_s=0.3, correctness_trials=3, reverify=False, interference_factor=1e9)
TASK = "09_Swish"


def _attempts(store, run):
    with store.session() as s:
        return s.execute(select(AttemptRow).where(AttemptRow.run_name == run).order_by(AttemptRow.id)).scalars().all()


def _store():
    from kernelrl.store import Store

    st = Store()
    st.ensure_ready()
    return st


def test_optimize_cli_with_the_tiny_model(isolated_home, tiny_model_path, tmp_path):
    from kernelrl.cli import app

    runner = CliRunner()
    args = ["optimize", TASK, "--llm", str(tiny_model_path), "--rounds", "2", "--samples", "2", "--max-tokens", "64",
            "--device", "cpu", "--llm-device", "cpu", "--run", "e2e", "--out", str(tmp_path / "best.py"), "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["run_name"] == "e2e" and summary["rounds_done"] == 2 and summary["attempts"] == 4
    store = _store()
    rows = _attempts(store, "e2e")
    assert [r.dedup_key for r in rows] == [f"e2e:builtin/L1/09_Swish:{r}:{i}" for r in (1, 2) for i in (0, 1)]
    for r in rows:  # every attempt recorded with its prompt, response, tokens and outcome
        assert r.stage == "optimize" and r.model == str(tiny_model_path)
        assert "Reference implementation" in r.prompt and "class Model(nn.Module)" in r.prompt
        assert r.response is not None and r.completion_tokens and r.prompt_tokens
        assert (r.parse_error is None) == (r.candidate_id is not None)
    assert summary["parsed"] == sum(r.candidate_id is not None for r in rows)
    if summary["best"] is None:
        assert not (tmp_path / "best.py").exists()

    # resume: same run, more rounds -> only round 3 is generated; earlier rows untouched
    first_ids = [r.id for r in rows]
    res = runner.invoke(app, args[:4] + ["--rounds", "3"] + args[6:])
    assert res.exit_code == 0, res.output
    rows = _attempts(store, "e2e")
    assert [r.id for r in rows][:4] == first_ids and len(rows) == 6
    assert json.loads(res.stdout.strip().splitlines()[-1])["rounds"][0]["kind"] == "resumed"
    # the same command again does nothing new
    res = runner.invoke(app, args[:4] + ["--rounds", "3"] + args[6:])
    assert res.exit_code == 0 and len(_attempts(store, "e2e")) == 6


def test_optimize_cli_table_output(isolated_home, tiny_model_path):
    from kernelrl.cli import app

    res = CliRunner().invoke(app, ["optimize", TASK, "--llm", str(tiny_model_path), "--rounds", "1", "--samples",
                                   "1", "--max-tokens", "8", "--device", "cpu", "--llm-device", "cpu", "--run", "tbl"])
    assert res.exit_code == 0, res.output
    assert "round" in res.output and "attempts" in res.output and "run tbl: 1 rounds, 1 attempts" in res.output


def test_optimize_user_errors(isolated_home, capsys, monkeypatch):
    from kernelrl.cli import main

    monkeypatch.delenv("KERNELRL_LLM_MODEL", raising=False)

    assert main(["optimize", TASK, "--llm", "tiny", "--sampler", "best"]) == 2
    assert "--sampler" in capsys.readouterr().err
    assert main(["optimize", "no_such_task", "--llm", "tiny"]) == 2
    assert "no_such_task" in capsys.readouterr().err
    assert main(["optimize", TASK, "--llm", "tiny", "--rounds", "0"]) == 2
    assert main(["optimize", TASK, "--llm", "./no/such/model", "--rounds", "1"]) == 2
    assert "no such model directory" in capsys.readouterr().err
    assert main(["optimize", TASK, "--llm", "http://127.0.0.1:9/v1", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert "URL#MODEL" in err and len(err.strip().splitlines()) == 1


def _response(code: str, note: str) -> str:
    return (f"## Performance Analysis\n{note}\n\n## Algorithm Design\n1. {note}\n\n"
            f"## Code Implementation\n```python\n{code}```\n")


def _seed(name: str) -> str:
    seeds = {s.name: s for s in load_seeds(get_task(TASK))}
    lines = seeds[name].source.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("# "))


def test_optimize_over_http_evaluates_and_builds_contrastive_prompts(isolated_home, chat_server, tmp_path):
    from kernelrl.search import optimize_task

    task = get_task(TASK)
    store = _store()
    silu = _response(_seed("silu"), "F.silu fuses the two passes")
    wrong = _response(_seed("hardswish"), "hardswish is cheaper")
    broken = "## Code Implementation\n```python\nclass ModelNew(nn.Module)\n    pass\n```\n"
    chat_server.faults.extend([f"canned:{silu}", f"canned:{wrong}", f"canned:{broken}"])
    spec = f"{chat_server.base_url}#tiny"
    kw = {"concurrency": 1, "backoff_s": 0.01, "timeout_s": 30}
    out = tmp_path / "best.py"
    res = optimize_task(task, llm=spec, rounds=2, samples=2, sampler="bucket", run_name="http", store=store,
                        eval_config=FAST_EVAL, out=out, backend_kwargs=kw)

    # round 1: no exemplars yet -> one augmentation request for both samples
    first = chat_server.requests[0]
    assert first["n"] == 2 and "Reply with one complete" in first["messages"][-1]["content"]
    assert "return x * torch.sigmoid(x)" in first["messages"][-1]["content"]  # the reference, verbatim
    # round 2: contrastive prompts with the verified exemplar and its speedup
    later = [r["messages"][-1]["content"] for r in chat_server.requests[1:]]
    assert len(later) == 2
    for text in later:
        assert "## Previous implementations and their measured speedups" in text
        assert "### Implementation 1: speedup" in text and "F.silu(x)" in text
        assert "## Performance Analysis" in text and "No caching or reuse" in text

    rows = _attempts(store, "http")
    assert len(rows) == 4 and res.attempts == 4
    r1, r2 = rows[:2], rows[2:]
    assert r1[0].candidate_id == r1[1].candidate_id is not None  # the same code: one candidate
    assert all(r.snapshot == 0 and r.exemplar_ids == [] for r in r1)
    assert all(r.exemplar_ids == [r1[0].candidate_id] and r.snapshot > 0 for r in r2)
    errors = sorted(str(r.parse_error) for r in r2)
    assert any("code does not parse" in e for e in errors)
    with store.session() as s:
        cands = s.execute(select(CandidateRow).where(CandidateRow.run_name == "http")).scalars().all()
        assert {c.origin_stage for c in cands} == {"optimize"} and len(cands) == 2
        assert all(c.analysis and c.design for c in cands)
        evs = {e.candidate_id: e for e in s.execute(select(EvaluationRow)).scalars().all()}
        jobs = s.execute(select(EvalJobRow)).scalars().all()
    assert set(evs) == {c.id for c in cands}  # every parsed candidate evaluated, through the service's queue
    assert jobs and all(j.status == "done" for j in jobs)
    silu_id = r1[0].candidate_id
    assert evs[silu_id].correct and not next(e for c, e in evs.items() if c != silu_id).correct
    assert res.correct == 2 and res.best["candidate_id"] == silu_id  # both round-1 attempts are the correct one
    header = out.read_text().splitlines()[:3]
    assert header[0] == "# kernelrl optimize: best verified ModelNew for builtin/L1/09_Swish"
    assert header[1].startswith(f"# verified speedup: {res.best['speedup']:.2f}x")
    assert "F.silu(x)" in out.read_text()
    assert res.usage["requests"] == 3 and res.usage["failures"] == 0

    # resume with another sampler: round 3 only; a 500 on the way is retried; the island state is persisted
    chat_server.faults.extend(["500", f"canned:{silu}", f"canned:{silu}"])
    res2 = optimize_task(task, llm=spec, rounds=3, samples=2, sampler="island", run_name="http", store=store,
                         eval_config=FAST_EVAL, backend_kwargs=kw)
    assert [s.kind for s in res2.rounds] == ["resumed", "resumed", "contrastive"]
    assert res2.attempts == 6 and res2.usage["retries"] == 1
    with store.session() as s:  # nothing re-submitted: resumed rounds and round 3's known code are evaluated
        assert len(s.execute(select(EvalJobRow)).scalars().all()) == len(jobs)
    assert (isolated_home / "runs" / "http" / "island-sampler.json").exists()
    assert len(_attempts(store, "http")) == 6

    # pools: a new run starts from the reference alone (pool=run) unless told to use the task's whole pool
    from kernelrl.search import SearchConfig

    chat_server.faults.extend([f"canned:{silu}", f"canned:{silu}"])
    n_req = len(chat_server.requests)
    fresh = optimize_task(task, llm=spec, run_name="fresh", store=store, eval_config=FAST_EVAL, backend_kwargs=kw,
                          config=SearchConfig(rounds=1, samples=1, max_tokens=64))
    shared = optimize_task(task, llm=spec, run_name="shared", store=store, eval_config=FAST_EVAL, backend_kwargs=kw,
                           config=SearchConfig(rounds=1, samples=1, max_tokens=64, pool="task"))
    assert [fresh.rounds[0].kind, shared.rounds[0].kind] == ["augment", "contrastive"]
    assert "### Implementation 1" in chat_server.requests[n_req + 1]["messages"][-1]["content"]
    assert fresh.best["candidate_id"] == shared.best["candidate_id"] == silu_id  # cached evaluation, same code


def test_optimize_budget_and_failed_generations(isolated_home, tiny_backend):
    from kernelrl.llm.backends.hf import HFBackend
    from kernelrl.search import optimize_task

    from kernelrl.search import SearchConfig

    store = _store()
    res = optimize_task(get_task(TASK), llm=tiny_backend, run_name="budget", store=store, eval_config=FAST_EVAL,
                        config=SearchConfig(rounds=3, samples=1, max_tokens=8))
    assert res.rounds_done == 3 and res.stopped == "rounds"  # no budget: all rounds

    res = optimize_task(get_task(TASK), llm=tiny_backend, run_name="budget2", store=store, eval_config=FAST_EVAL,
                        config=SearchConfig(rounds=5, samples=1, max_tokens=8, budget_s=0.001))
    assert res.rounds_done == 1 and res.stopped == "budget"
    # a prompt the model cannot take: failed generations are attempts with the reason, the run still finishes
    small = HFBackend(None, model=tiny_backend.lm, tokenizer=tiny_backend.tokenizer, max_context=32)
    res = optimize_task(get_task(TASK), llm=small, run_name="ctx", store=store, eval_config=FAST_EVAL,
                        config=SearchConfig(rounds=1, samples=2, max_tokens=8))
    rows = _attempts(store, "ctx")
    assert len(rows) == 2 and all("generation failed: prompt too long" in r.parse_error for r in rows)
    assert res.attempts == 2 and res.parsed == 0


@pytest.mark.parametrize("bad", [{"rounds": 0}, {"samples": 0}])
def test_search_config_validation(bad):
    from kernelrl.errors import ConfigError
    from kernelrl.search import SearchConfig

    with pytest.raises(ConfigError):
        SearchConfig(**bad).validate()
